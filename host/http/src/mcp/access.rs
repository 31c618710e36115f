//! Who may reach the MCP endpoint from where: the RFC 9728 protected-resource metadata a
//! `401` points to, and CORS for the browser origins an operator allows
//! (`server.cors_origins`).
//!
//! Agent tokens stay the credential: the metadata names the endpoint and how to send a
//! bearer token, and no authorization server (tokens are issued by the operator API,
//! `POST /api/v1/agents/{id}/tokens`). It is served for any well-formed agent id, so it
//! tells an unauthenticated caller nothing about which agents exist.

use crate::ApiError;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use connector_core::host::Host;
use connector_model::ids::AgentId;

/// Where the metadata of an agent's endpoint lives, before the agent's id.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// Request headers a browser client may send (besides the CORS-safelisted ones).
const ALLOWED_HEADERS: &str = "authorization, content-type, accept, mcp-protocol-version, \
     mcp-session-id, mcp-method, mcp-name, last-event-id";
/// Response headers a browser client may read.
const EXPOSED_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

/// `scheme://host` as the client addressed this server (`X-Forwarded-Proto: https` from a
/// TLS-terminating proxy gives `https`), if the `Host` header can be used in a URL and a
/// quoted header parameter.
fn base_url(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    if host.is_empty() || host.contains(['"', '\\', ' ', '/', '@']) {
        return None;
    }
    let https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    Some(format!("{}://{host}", if https { "https" } else { "http" }))
}

/// The `WWW-Authenticate` value of a `401` from `agent`'s endpoint: `Bearer` with the
/// `resource_metadata` URL (RFC 9728 §5.1).
pub fn www_authenticate(headers: &HeaderMap, agent: &str) -> HeaderValue {
    let value = base_url(headers)
        .filter(|_| AgentId::parse(agent).is_ok())
        .map(|base| {
            format!(r#"Bearer resource_metadata="{base}{METADATA_PREFIX}/mcp/agents/{agent}""#)
        });
    value
        .and_then(|v| HeaderValue::from_str(&v).ok())
        .unwrap_or_else(|| HeaderValue::from_static("Bearer"))
}

/// `GET /.well-known/oauth-protected-resource/mcp/agents/{agentId}`: RFC 9728 metadata of
/// that agent's MCP endpoint.
pub async fn metadata(Path(agent): Path<String>, headers: HeaderMap) -> Response {
    let agent = match AgentId::parse(&agent) {
        Ok(agent) => agent,
        Err(e) => return ApiError(e).into_response(),
    };
    let Some(base) = base_url(&headers) else {
        return ApiError(connector_model::error::HostError::invalid_request(
            "the Host header cannot be used in a URL",
        ))
        .into_response();
    };
    Json(json!({
        "resource": format!("{base}/mcp/agents/{agent}"),
        "bearer_methods_supported": ["header"],
        "resource_name": format!("connector-host: the tools of agent {agent}"),
        "resource_documentation": format!("{base}/api/v1/agents/{agent}/tools"),
    }))
    .into_response()
}

/// Whether the operator allows browser pages of `origin` to call the endpoint.
pub fn origin_allowed(host: &Host, origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    host.config()
        .cors_origins
        .iter()
        .any(|o| o == "*" || o.eq_ignore_ascii_case(origin))
}

/// CORS for the MCP routes: a preflight from an allowed origin is answered here (no token
/// needed: browsers send none with it), and every answer to an allowed origin says so.
/// Other origins get no CORS headers (the browser then refuses to read the answer, and
/// the MCP handlers refuse a foreign `Origin` themselves).
pub async fn cors(State(host): State<Host>, request: Request, next: Next) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| origin_allowed(&host, o))
        .and_then(|o| HeaderValue::from_str(o).ok());
    let Some(origin) = origin else {
        return next.run(request).await;
    };
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOWED_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        let mut r = next.run(request).await;
        r.headers_mut().insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED_HEADERS),
        );
        r
    };
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("origin"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(host: &str, proto: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(p) = proto {
            h.insert("x-forwarded-proto", HeaderValue::from_str(p).unwrap());
        }
        h
    }

    #[test]
    fn the_challenge_points_to_the_agents_metadata() {
        assert_eq!(
            www_authenticate(&headers("127.0.0.1:8787", None), "ada"),
            r#"Bearer resource_metadata="http://127.0.0.1:8787/.well-known/oauth-protected-resource/mcp/agents/ada""#
        );
        assert_eq!(
            www_authenticate(&headers("mcp.example.com", Some("https")), "ada"),
            r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp/agents/ada""#
        );
        // Nothing that could break out of the quoted parameter.
        assert_eq!(www_authenticate(&headers("evil\"x", None), "ada"), "Bearer");
        assert_eq!(www_authenticate(&headers("h", None), "a\"b"), "Bearer");
    }
}
