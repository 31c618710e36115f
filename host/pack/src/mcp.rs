//! Tool discovery on a remote MCP server at pack time: a small Streamable HTTP client.
//!
//! `initialize`, `notifications/initialized`, `tools/list` (paged by `nextCursor`), then
//! `DELETE` of the session. Every request is a POST of one JSON-RPC message with
//! `Accept: application/json, text/event-stream`; the answer is either a JSON body or a
//! Server-Sent Events stream whose `data:` lines carry the response (read only until the
//! response arrives). `Mcp-Session-Id` from `initialize` is sent back on every later
//! request, with `MCP-Protocol-Version`. Each request has a 10 s budget and reads at
//! most 16 MiB of answer, and every failure names the server's URL.

use std::io::Read;
use std::time::Duration;

use connector_mcp_protocol::client::{self, BodyKind, ClientSession, Failure};
use connector_mcp_protocol::sse::EventStreamDecoder;
use serde_json::{json, Value};
/// The budget of one request.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response pack reads.
const MAX_RESPONSE: u64 = 16 * 1024 * 1024;
/// The most `tools/list` pages pack follows.
const MAX_PAGES: usize = 1000;

/// One tool of the server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServerTool {
    pub name: String,
    pub description: Option<String>,
    /// Its `inputSchema` (an object schema).
    pub input_schema: Value,
    /// Its `annotations` (MCP `ToolAnnotations`), or null.
    pub annotations: Value,
}

/// Why the tools of an MCP server could not be listed. Its
/// [`connector_remote_answer::error_chain`] is the problem `pack` reports.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DiscoveryError {
    #[error("the MCP discovery thread panicked")]
    Panicked,
    #[error("could not start an HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("could not reach the MCP server at {url} ({method})")]
    Unreachable {
        url: String,
        method: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "the MCP server at {url} answered {method} with HTTP {status}{}",
        excerpt_after_colon(excerpt)
    )]
    Status {
        url: String,
        method: String,
        status: reqwest::StatusCode,
        /// The start of the answer's body.
        excerpt: String,
    },
    #[error("the MCP server at {url} gave a malformed answer to {method}: {what}")]
    Malformed {
        url: String,
        method: String,
        what: BadAnswer,
    },
    #[error("the MCP server at {url} answered {method} with error {code}: {message}")]
    Refused {
        url: String,
        method: String,
        /// The JSON-RPC error code as JSON (`?` when it sent none).
        code: String,
        message: String,
    },
    #[error("the MCP server at {url} does not offer tools (no `tools` capability)")]
    NoTools { url: String },
    #[error("the MCP server at {url} answered tools/list without a `tools` list")]
    NoToolsList { url: String },
    #[error("the MCP server at {url} listed a malformed tool: {problem}")]
    MalformedTool { url: String, problem: ToolProblem },
    #[error("the MCP server at {url} repeats the tools/list cursor `{cursor}`")]
    RepeatedCursor { url: String, cursor: String },
    #[error("the MCP server at {url} has more than {MAX_PAGES} pages of tools")]
    TooManyPages { url: String },
}

fn excerpt_after_colon(excerpt: &str) -> String {
    match excerpt.trim() {
        "" => String::new(),
        text => format!(": {text}"),
    }
}

/// What is wrong with an answer of the server.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadAnswer {
    #[error(transparent)]
    EventStream(#[from] EventStreamError),
    #[error(transparent)]
    Body(#[from] connector_remote_answer::AnswerError),
    #[error("the answer is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("no response to the request")]
    NoResponse,
    #[error("unexpected Content-Type `{0}` (expected application/json or text/event-stream)")]
    ContentType(String),
    #[error("a response with neither `result` nor `error`")]
    NeitherResultNorError,
}

/// Why an event stream gave no response to the request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EventStreamError {
    #[error("could not read the event stream: {0}")]
    Read(std::io::Error),
    #[error("the event stream passed {} without the response", connector_remote_answer::size(*.0))]
    TooLong(u64),
    #[error("the event stream ended without the response")]
    Ended,
}

/// What is wrong with one tool a server listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolProblem {
    #[error("a tool without a `name`")]
    Unnamed,
    #[error("tool `{name}` has an inputSchema that is not an object: {schema}")]
    SchemaNotAnObject { name: String, schema: Value },
}

/// Lists the tools of the server at `url`, sending `headers` with every request.
///
/// Runs on a thread of its own: the blocking client must not live inside an async
/// runtime, and a caller of `pack` may be in one.
pub(crate) fn discover(
    url: &str,
    headers: &[(String, String)],
) -> Result<Vec<ServerTool>, DiscoveryError> {
    let url = url.to_string();
    let headers = headers.to_vec();
    std::thread::spawn(move || discover_here(&url, &headers))
        .join()
        .unwrap_or(Err(DiscoveryError::Panicked))
}

fn discover_here(
    url: &str,
    headers: &[(String, String)],
) -> Result<Vec<ServerTool>, DiscoveryError> {
    let client = reqwest::blocking::Client::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .build()
        .map_err(DiscoveryError::Client)?;
    let mut session = Session {
        client,
        url: url.to_string(),
        headers: headers.to_vec(),
        mcp: ClientSession::new(),
    };
    let result = session.list_tools();
    session.close();
    result
}

struct Session {
    client: reqwest::blocking::Client,
    url: String,
    headers: Vec<(String, String)>,
    mcp: ClientSession,
}

impl Session {
    fn list_tools(&mut self) -> Result<Vec<ServerTool>, DiscoveryError> {
        let (id, message) = self
            .mcp
            .initialize("connector-host-pack", env!("CARGO_PKG_VERSION"));
        let init = self.exchange("initialize", id, &message)?;
        self.mcp.adopt_initialize(&init);
        if init.pointer("/capabilities/tools").is_none() {
            return Err(DiscoveryError::NoTools {
                url: self.url.clone(),
            });
        }
        self.notify("notifications/initialized")?;

        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", params)?;
            let list = page.get("tools").and_then(Value::as_array).ok_or_else(|| {
                DiscoveryError::NoToolsList {
                    url: self.url.clone(),
                }
            })?;
            for tool in list {
                tools.push(
                    server_tool(tool).map_err(|problem| DiscoveryError::MalformedTool {
                        url: self.url.clone(),
                        problem,
                    })?,
                );
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => {
                    if seen.iter().any(|c| c == next) {
                        return Err(DiscoveryError::RepeatedCursor {
                            url: self.url.clone(),
                            cursor: next.to_string(),
                        });
                    }
                    seen.push(next.to_string());
                    cursor = Some(next.to_string());
                }
                _ => return Ok(tools),
            }
        }
        Err(DiscoveryError::TooManyPages {
            url: self.url.clone(),
        })
    }

    fn post(&self, body: &Value) -> reqwest::blocking::RequestBuilder {
        let mut request = self
            .client
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", client::ACCEPT)
            .body(body.to_string());
        for (name, value) in self.mcp.headers() {
            request = request.header(name, value);
        }
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        request
    }

    fn send(
        &self,
        method: &str,
        request: reqwest::blocking::RequestBuilder,
    ) -> Result<reqwest::blocking::Response, DiscoveryError> {
        let response = request
            .send()
            .map_err(|source| DiscoveryError::Unreachable {
                url: self.url.clone(),
                method: method.to_string(),
                source,
            })?;
        let status = response.status();
        if !status.is_success() {
            let mut excerpt = String::new();
            let _ = response.take(2048).read_to_string(&mut excerpt);
            return Err(DiscoveryError::Status {
                url: self.url.clone(),
                method: method.to_string(),
                status,
                excerpt,
            });
        }
        Ok(response)
    }

    /// Sends a request and returns its `result`.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, DiscoveryError> {
        let (id, message) = self.mcp.request(method, params);
        self.exchange(method, id, &message)
    }

    /// Sends request `id` (`message`) and returns its `result`.
    fn exchange(
        &mut self,
        method: &str,
        id: u64,
        message: &Value,
    ) -> Result<Value, DiscoveryError> {
        let response = self.send(method, self.post(message))?;
        self.mcp.adopt_session_id(
            response
                .headers()
                .get(connector_mcp_protocol::revision::SESSION_HEADER)
                .and_then(|v| v.to_str().ok()),
        );
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let message = match BodyKind::of(&content_type) {
            BodyKind::EventStream => {
                read_sse(response, id).map_err(|e| self.bad(method, e.into()))?
            }
            BodyKind::Json => {
                let body = connector_remote_answer::read_at_most_blocking(response, MAX_RESPONSE)
                    .map_err(|e| self.bad(method, e.into()))?;
                let value: Value = serde_json::from_slice(&body)
                    .map_err(|e| self.bad(method, BadAnswer::NotJson(e)))?;
                client::find_response(value, id)
                    .ok_or_else(|| self.bad(method, BadAnswer::NoResponse))?
            }
            BodyKind::Other => {
                return Err(self.bad(method, BadAnswer::ContentType(content_type)));
            }
        };
        client::outcome(message).map_err(|failure| match failure {
            Failure::Error { code, message } => DiscoveryError::Refused {
                url: self.url.clone(),
                method: method.to_string(),
                code: if code.is_null() {
                    "?".to_string()
                } else {
                    code.to_string()
                },
                message,
            },
            Failure::Malformed => self.bad(method, BadAnswer::NeitherResultNorError),
        })
    }

    fn notify(&mut self, method: &str) -> Result<(), DiscoveryError> {
        self.send(method, self.post(&ClientSession::notification(method)))
            .map(drop)
    }

    /// Ends the session (servers that do not support it answer 405: fine).
    fn close(&mut self) {
        if self.mcp.has_session_id() {
            let mut request = self.client.delete(&self.url);
            for (name, value) in self.mcp.headers() {
                request = request.header(name, value);
            }
            for (name, value) in &self.headers {
                request = request.header(name, value);
            }
            let _ = request.send();
            self.mcp.end();
        }
    }

    fn bad(&self, method: &str, what: BadAnswer) -> DiscoveryError {
        DiscoveryError::Malformed {
            url: self.url.clone(),
            method: method.to_string(),
            what,
        }
    }
}

/// Reads Server-Sent Events until the response to `id` arrives, at most
/// [`MAX_RESPONSE`] bytes of them.
fn read_sse(response: impl Read, id: u64) -> Result<Value, EventStreamError> {
    read_sse_at_most(response, id, MAX_RESPONSE)
}

fn read_sse_at_most(response: impl Read, id: u64, limit: u64) -> Result<Value, EventStreamError> {
    let mut response = response.take(limit);
    let mut decoder = EventStreamDecoder::new(usize::try_from(limit).unwrap_or(usize::MAX));
    let found = |data: Vec<u8>| {
        serde_json::from_slice(&data)
            .ok()
            .and_then(|value| client::find_response(value, id))
    };
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = response.read(&mut chunk).map_err(EventStreamError::Read)?;
        if read == 0 {
            break;
        }
        if let Some(message) = decoder.feed(&chunk[..read]).into_iter().find_map(found) {
            return Ok(message);
        }
    }
    if let Some(message) = decoder.finish().and_then(found) {
        return Ok(message);
    }
    if response.limit() == 0 {
        return Err(EventStreamError::TooLong(limit));
    }
    Err(EventStreamError::Ended)
}

fn server_tool(tool: &Value) -> Result<ServerTool, ToolProblem> {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or(ToolProblem::Unnamed)?
        .to_string();
    let input_schema = match tool.get("inputSchema") {
        Some(s @ Value::Object(_)) => s.clone(),
        None | Some(Value::Null) => json!({"type": "object"}),
        Some(other) => {
            return Err(ToolProblem::SchemaNotAnObject {
                name,
                schema: other.clone(),
            })
        }
    };
    Ok(ServerTool {
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        annotations: tool.get("annotations").cloned().unwrap_or(Value::Null),
        input_schema,
        name,
    })
}

/// A server tool's name as a tool id segment: lower case, `[a-z0-9_]`.
pub(crate) fn normalise(name: &str) -> String {
    name.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_streams_yield_the_matching_response() {
        let stream =
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n\
                      : comment\ndata: {\"jsonrpc\":\"2.0\",\n\
                      data: \"id\":3,\"result\":{\"ok\":true}}\n\nid: 9\n";
        let found = read_sse(stream.as_bytes(), 3).expect("found");
        assert_eq!(found["result"]["ok"], true);
        assert_eq!(
            read_sse(stream.as_bytes(), 4)
                .expect_err("no answer to 4")
                .to_string(),
            "the event stream ended without the response"
        );
        let comments = ": keep-alive\n".repeat(1000);
        assert_eq!(
            read_sse_at_most(comments.as_bytes(), 3, 4096)
                .expect_err("too long")
                .to_string(),
            "the event stream passed 4 KiB without the response"
        );
        assert_eq!(normalise("Get-Weather.v2"), "get_weather_v2");
    }
}
