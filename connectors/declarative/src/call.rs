//! One tool call: fill the request, send it through the host's policed outbound HTTP,
//! turn the answer into a tool result.
//!
//! What this module returns may still hold secret values an API echoed back: the caller
//! passes it through [`crate::redact::Redactor`] before it leaves the component.

use connector_sdk::http::{self, HttpError, Request, Response};
use connector_sdk::{Content, ResourceContents, ResourceLink, ToolError, ToolOutput};
use declarative_plan::{Backend, HttpRequest, McpCall, Root, Tool};
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

/// The MCP revision the interpreter speaks to remote servers.
const MCP_PROTOCOL_VERSION: &str = "2025-06-18";

fn render_error(tool: &Tool, e: RenderError) -> ToolError {
    match e {
        RenderError::Missing(name, Root::Argument) => ToolError::InvalidArguments(format!(
            "`{}` needs a value for `{name}`: pass it as an argument",
            tool.id
        )),
        RenderError::Missing(name, Root::Agent) => ToolError::Failed(format!(
            "`{}` needs `{name}`, which only a call on behalf of an agent has",
            tool.id
        )),
        RenderError::Missing(name, _) => ToolError::Failed(format!(
            "`{}` needs `{name}`, which the binding's config does not set: the operator sets it \
             (rebind with the value)",
            tool.id
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

/// Runs `tool` with `scope`.
pub fn run(tool: &Tool, scope: &Scope) -> Result<ToolOutput, ToolError> {
    match &tool.backend {
        Backend::Http(request) => run_http(tool, request, scope),
        Backend::Mcp(call) => run_mcp(tool, call, scope),
    }
}

fn run_http(tool: &Tool, spec: &HttpRequest, scope: &Scope) -> Result<ToolOutput, ToolError> {
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
    let response = http::request(request).map_err(|e| transport_error(&tool.id, e))?;
    http_output(response)
}

/// A tool result from an HTTP response.
pub fn http_output(response: Response) -> Result<ToolOutput, ToolError> {
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
            return ToolOutput::new().structured(&value);
        }
    }
    if response.body.is_empty() {
        return ToolOutput::new().structured(&json!({ "status": response.status }));
    }
    Ok(ToolOutput::new().text(response.text().into_owned()))
}

/// A Streamable HTTP session with a remote MCP server, for one call.
struct McpSession {
    url: String,
    headers: Vec<(String, String)>,
    session: Option<String>,
    protocol: Option<String>,
    next_id: u64,
}

impl McpSession {
    fn post(&mut self, message: &Value) -> Result<Response, ToolError> {
        let mut request = Request::post(self.url.clone())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        request.headers.extend(self.headers.iter().cloned());
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session.clone());
        }
        if let Some(protocol) = &self.protocol {
            request = request.header("mcp-protocol-version", protocol.clone());
        }
        let request = request
            .json(message)
            .map_err(|e| ToolError::Failed(format!("could not encode an MCP request: {e}")))?;
        http::request(request).map_err(|e| transport_error("the MCP server", e))
    }

    /// Sends a request and returns its JSON-RPC result.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, ToolError> {
        self.next_id += 1;
        let id = self.next_id;
        let response = self.post(&json!({
            "jsonrpc": "2.0", "id": id, "method": method, "params": params
        }))?;
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
        if let Some(session) = response.header("mcp-session-id") {
            self.session = Some(session.to_owned());
        }
        let answer = find_response(&response, id).ok_or_else(|| {
            ToolError::Failed(format!(
                "the MCP server sent no answer to `{method}` (request {id})"
            ))
        })?;
        if let Some(error) = answer.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(ToolError::Failed(format!(
                "the MCP server refused `{method}`: {message}"
            )));
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| ToolError::Failed(format!("the MCP answer to `{method}` has no result")))
    }

    fn close(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let mut request = Request::delete(self.url.clone()).header("mcp-session-id", session);
        request.headers.extend(self.headers.iter().cloned());
        // The session ends with this call either way; a server that keeps it is not our
        // failure to report.
        let _ = http::request(request);
    }
}

/// The JSON-RPC response with `id` in a JSON or SSE body.
fn find_response(response: &Response, id: u64) -> Option<Value> {
    let is_sse = response
        .header("content-type")
        .is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
    let matches = |v: &Value| v.get("id").and_then(Value::as_u64) == Some(id);
    if !is_sse {
        let value: Value = serde_json::from_slice(&response.body).ok()?;
        return match value {
            Value::Array(items) => items.into_iter().find(|v| matches(v)),
            v => matches(&v).then_some(v),
        };
    }
    let text = response.text();
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.is_empty() {
            if !data.is_empty() {
                if let Ok(value) = serde_json::from_str::<Value>(&data) {
                    if matches(&value) {
                        return Some(value);
                    }
                }
                data.clear();
            }
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    None
}

fn run_mcp(tool: &Tool, call: &McpCall, scope: &Scope) -> Result<ToolOutput, ToolError> {
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
        session: None,
        protocol: None,
        next_id: 0,
    };
    let result = (|| {
        let init = session.request(
            "initialize",
            json!({
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "connector-host-declarative", "version": env!("CARGO_PKG_VERSION")}
            }),
        )?;
        session.protocol = Some(
            init.get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or(MCP_PROTOCOL_VERSION)
                .to_owned(),
        );
        let initialized = session.post(&json!({
            "jsonrpc": "2.0", "method": "notifications/initialized"
        }))?;
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
pub fn mcp_output(result: Value) -> Result<ToolOutput, ToolError> {
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
    let mut output = ToolOutput::new();
    if let Some(structured) = result.get("structuredContent") {
        output = output.structured(structured)?;
    }
    for block in &blocks {
        if let Some(content) = mcp_block(block) {
            output = output.push(content);
        }
    }
    Ok(output)
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
        assert_eq!(out.structured_value(), Some(json!({"a": 1})));
        let out = http_output(response(200, "text/plain", "hello")).unwrap();
        assert_eq!(out.content(), &[Content::Text("hello".into())]);
        let out = http_output(response(204, "text/plain", "")).unwrap();
        assert_eq!(out.structured_value(), Some(json!({"status": 204})));
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
    fn mcp_answers_are_found_in_json_and_in_sse() {
        let sse = response(
            200,
            "text/event-stream",
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
             data: {\"jsonrpc\":\"2.0\",\"id\":2,\n\
             data: \"result\":{\"ok\":true}}\n\n",
        );
        assert_eq!(
            find_response(&sse, 2),
            Some(json!({"jsonrpc": "2.0", "id": 2, "result": {"ok": true}}))
        );
        assert_eq!(find_response(&sse, 3), None);
        let plain = response(
            200,
            "application/json",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        );
        assert!(find_response(&plain, 1).is_some());
    }

    #[test]
    fn mcp_results_map_to_tool_results() {
        let out = mcp_output(json!({
            "content": [{"type": "text", "text": "3"}, {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
            "structuredContent": {"sum": 3}
        }))
        .unwrap();
        assert_eq!(out.structured_value(), Some(json!({"sum": 3})));
        assert_eq!(out.content().len(), 2);
        assert_eq!(
            mcp_output(json!({"content": [{"type": "text", "text": "boom"}], "isError": true})),
            Err(ToolError::Failed("boom".into()))
        );
    }
}
