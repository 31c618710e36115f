//! A fake API that gives back the credential it was sent, encoded the ways real APIs and
//! their error pages do: base64 (standard and URL-safe, padded or not, wrapped), inside
//! HTTP `Basic` credentials, hex, percent-encoded, inside a base64 JSON document. The
//! declarative connectors' redaction tests call it through a packed manifest
//! (`tests/fixtures/declarative/echo.yaml`) and check that none of it reaches an agent.
//!
//! The credential is the `X-Api-Key` header (HTTP routes) or the bearer token (MCP):
//!
//! - `GET /echo`: a JSON document of encodings of the key and of the request's headers;
//! - `GET /echo.txt`: the same, as plain text lines;
//! - `GET /fail`: `401` quoting the key as a `Basic` credential and in hex;
//! - `GET /big?size=N`: `N` bytes of text, base64 and hex, with the key's `Basic`
//!   credential every 64 KiB (for timing redaction of a large answer);
//! - `POST /mcp`: a Streamable HTTP MCP server (JSON answers) with two tools: `reflect`
//!   answers with every kind of content block carrying the token, encoded; `refuse` fails
//!   (`isError`) quoting it.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::fake_api::base64_encode;

/// Standard base64 without padding.
pub fn base64_unpadded(data: &[u8]) -> String {
    base64_encode(data).trim_end_matches('=').to_string()
}

/// URL-safe base64 without padding.
pub fn base64_url(data: &[u8]) -> String {
    base64_unpadded(data).replace('+', "-").replace('/', "_")
}

/// Lower-case hex.
pub fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every byte as `%XX`.
pub fn percent_every_byte(data: &[u8]) -> String {
    data.iter().map(|b| format!("%{b:02X}")).collect()
}

/// The echo API; stops when dropped.
pub struct FakeEcho {
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeEcho {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeEcho {
    pub async fn start() -> FakeEcho {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let router = Router::new().fallback(handle);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FakeEcho {
            url: format!("http://{addr}"),
            server,
        }
    }

    /// The base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.url)
    }
}

fn header_text(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// The request's headers as `name: value` lines, sorted.
fn header_dump(headers: &HeaderMap) -> String {
    let mut lines: Vec<String> = headers
        .iter()
        .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v.as_bytes())))
        .collect();
    lines.sort();
    lines.join("\r\n")
}

/// `text` broken into lines of `width` characters, as MIME and PEM wrap base64.
fn wrapped(text: &str, width: usize) -> String {
    text.as_bytes()
        .chunks(width)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64_encode(format!("{user}:{password}").as_bytes())
    )
}

fn echo_document(key: &str, headers: &HeaderMap, query: Option<&str>) -> Value {
    let request = json!({"headers": header_dump(headers), "query": query});
    json!({
        "note": "the request as this API saw it",
        "query": query,
        "authorization": header_text(headers, "authorization"),
        "basic": basic("api", key),
        "basic_as_user": basic(key, "x-oauth-basic"),
        "headers_b64": base64_encode(header_dump(headers).as_bytes()),
        "authorization_b64url": base64_url(header_text(headers, "authorization").as_bytes()),
        "key_hex": hex(key.as_bytes()),
        "key_hex_upper": hex(key.as_bytes()).to_uppercase(),
        "request_b64_wrapped": wrapped(&base64_encode(request.to_string().as_bytes()), 76),
    })
}

/// `size` bytes of text: prose, a base64 blob and a hex digest per 1 KiB, and the key's
/// `Basic` credential every 64 KiB.
fn big(key: &str, size: usize) -> String {
    let credential = basic("api", key);
    let mut out = String::with_capacity(size + 1024);
    let mut n: u32 = 0;
    while out.len() < size {
        if n % 64 == 63 {
            out.push_str(&format!("Authorization: {credential}\n"));
        }
        let blob: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(31) ^ n) as u8)
            .collect();
        out.push_str(&format!(
            "record {n}: the quick brown fox jumps over the lazy dog. sha={} data={}\n",
            hex(&n.to_be_bytes().repeat(5)),
            base64_encode(&blob)
        ));
        n += 1;
    }
    out.truncate(size);
    out
}

async fn handle(request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 1024 * 1024)
        .await
        .unwrap_or_default();
    let headers = &parts.headers;
    let key = header_text(headers, "x-api-key");
    let query = parts.uri.query();
    let text = |status: StatusCode, body: String| {
        (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
    };
    match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/echo") => Json(echo_document(&key, headers, query)).into_response(),
        (&Method::GET, "/echo.txt") => {
            let doc = echo_document(&key, headers, query);
            let lines: Vec<String> = doc
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}: {}", v.as_str().unwrap_or_default()))
                .collect();
            text(StatusCode::OK, lines.join("\n"))
        }
        (&Method::GET, "/fail") => text(
            StatusCode::UNAUTHORIZED,
            format!(
                "invalid credentials: {} (key {})",
                basic("api", &key),
                hex(key.as_bytes()).to_uppercase()
            ),
        ),
        (&Method::GET, "/big") => {
            let size = query
                .and_then(|q| q.strip_prefix("size="))
                .and_then(|s| s.parse().ok())
                .unwrap_or(1024);
            text(StatusCode::OK, big(&key, size))
        }
        (&Method::POST, "/mcp") => mcp(headers, &body),
        (&Method::DELETE, "/mcp") => StatusCode::OK.into_response(),
        _ => text(StatusCode::NOT_FOUND, "not found".into()),
    }
}

fn mcp(headers: &HeaderMap, body: &[u8]) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification.
        return StatusCode::ACCEPTED.into_response();
    };
    let authorization = header_text(headers, "authorization");
    let token = authorization
        .strip_prefix("Bearer ")
        .unwrap_or_default()
        .to_string();
    let params = &message["params"];
    let result = match message["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo", "version": "1"}
        }),
        "tools/list" => json!({"tools": [
            {"name": "reflect", "description": "Gives back the credential it got, encoded.",
             "inputSchema": {"type": "object"}},
            {"name": "refuse", "description": "Fails, quoting the credential.",
             "inputSchema": {"type": "object"}}
        ]}),
        "tools/call" if params["name"] == "reflect" => {
            let mut image = b"\x89PNG\r\n\x1a\n\0\0\0\x0ctEXtkey\0".to_vec();
            image.extend_from_slice(token.as_bytes());
            json!({
                "content": [
                    {"type": "text", "text": format!("you sent {}", base64_encode(authorization.as_bytes()))},
                    {"type": "resource_link",
                     "uri": format!("https://echo.example/cb?state={}", base64_url(token.as_bytes())),
                     "name": hex(token.as_bytes()),
                     "title": basic("api", &token),
                     "description": format!("key {}", hex(token.as_bytes()).to_uppercase())},
                    {"type": "resource", "resource": {
                        "uri": format!("https://echo.example/req/{}", hex(token.as_bytes())),
                        "mimeType": "text/plain",
                        "text": format!("token={}", percent_every_byte(token.as_bytes()))}},
                    {"type": "resource", "resource": {
                        "uri": "https://echo.example/blob",
                        "mimeType": "application/octet-stream",
                        "blob": base64_encode(format!("blob:{token}").as_bytes())}},
                    {"type": "image", "mimeType": "image/png", "data": base64_encode(&image)}
                ],
                "structuredContent": {
                    "basic": basic("api", &token),
                    "hex": hex(token.as_bytes()),
                    "note": "kept"
                }
            })
        }
        "tools/call" if params["name"] == "refuse" => json!({
            "content": [{"type": "text", "text": format!("refused: {}", basic("api", &token))}],
            "isError": true
        }),
        other => {
            return Json(json!({"jsonrpc": "2.0", "id": id,
                               "error": {"code": -32601, "message": format!("no method {other}")}}))
            .into_response()
        }
    };
    let mut response = Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response();
    if message["method"] == "initialize" {
        response.headers_mut().insert(
            "mcp-session-id",
            header::HeaderValue::from_static("echo-session"),
        );
    }
    response
}
