//! Request parsing and authentication that answer in the contract's error shape.
//!
//! axum's own extractors answer rejections in plain text; these answer with
//! `{"error": {code, message}}` and the contract's codes: `415` for a body that is not
//! JSON, `400 invalid_request` for malformed JSON or unknown fields, `413` for an
//! oversized body, `401`/`403` for authentication.

use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap};
use serde::de::DeserializeOwned;

use crate::error::{ErrorKind, HostError};
use crate::host::Host;

/// Which callers a route admits.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// The operator only.
    Operator,
    /// The operator, or an agent token of this agent.
    Agent(&'a str),
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks the request's bearer token against `access`.
pub fn authorize(host: &Host, headers: &HeaderMap, access: Access<'_>) -> Result<(), HostError> {
    let unauthenticated = || {
        HostError::new(
            ErrorKind::Unauthenticated,
            "unauthenticated",
            "missing or invalid bearer token: send `Authorization: Bearer <token>`",
        )
    };
    let token = bearer(headers).ok_or_else(unauthenticated)?;
    if host.is_operator_token(token) {
        return Ok(());
    }
    match access {
        Access::Operator => Err(unauthenticated()),
        Access::Agent(agent) => match host.agent_of_token(token) {
            Some(owner) if owner == agent => Ok(()),
            Some(_) => Err(HostError::new(
                ErrorKind::Forbidden,
                "forbidden",
                "this agent token belongs to another agent",
            )),
            None => Err(unauthenticated()),
        },
    }
}

/// Largest JSON request body.
const MAX_JSON_BYTES: usize = 2 * 1024 * 1024;

/// A JSON body; an empty body reads as `{}` so optional-only bodies may be omitted.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = HostError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.to_ascii_lowercase());
        let (parts, body) = req.into_parts();
        let bytes = super::read_limited(&parts.headers, body, MAX_JSON_BYTES)
            .await
            .map_err(|e| match e {
                super::BodyError::TooLarge => HostError::new(
                    ErrorKind::PayloadTooLarge,
                    "payload_too_large",
                    "the request body is too large (at most 2 MiB of JSON)",
                ),
                super::BodyError::Unreadable(e) => {
                    HostError::invalid_request(format!("could not read the request body: {e}"))
                }
            })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        if !bytes.is_empty() {
            let is_json = content_type.as_deref().is_some_and(|ct| {
                let mime = ct.split(';').next().unwrap_or("").trim();
                mime == "application/json" || mime.ends_with("+json")
            });
            if !is_json {
                return Err(HostError::new(
                    ErrorKind::UnsupportedMediaType,
                    "unsupported_media_type",
                    "send JSON with Content-Type: application/json",
                ));
            }
        }
        serde_json::from_slice(text)
            .map(ApiJson)
            .map_err(|e| HostError::invalid_request(format!("the request body is not valid: {e}")))
    }
}
