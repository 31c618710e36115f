//! JSON request bodies that answer in the contract's error shape.
//!
//! axum's own `Json` answers rejections in plain text; [`ApiJson`] answers with
//! `{"error": {code, message}}` and the contract's codes: `415` for a body that is not
//! JSON, `400 invalid_request` for malformed JSON or unknown fields, `413` for an
//! oversized body.

use crate::ApiError;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde::de::DeserializeOwned;

use connector_model::error::{ErrorCode, HostError};

/// Largest JSON request body.
const MAX_JSON_BYTES: usize = 2 * 1024 * 1024;

/// A JSON body; an empty body reads as `{}` so optional-only bodies may be omitted.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.to_ascii_lowercase());
        let (parts, body) = req.into_parts();
        let bytes = super::body::read_limited(&parts.headers, body, MAX_JSON_BYTES)
            .await
            .map_err(|e| {
                e.into_host_error(|| {
                    HostError::new(
                        ErrorCode::PayloadTooLarge,
                        "the request body is too large (at most 2 MiB of JSON)",
                    )
                })
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
                return Err(ApiError(HostError::new(
                    ErrorCode::UnsupportedMediaType,
                    "send JSON with Content-Type: application/json",
                )));
            }
        }
        serde_json::from_slice(text).map(ApiJson).map_err(|e| {
            ApiError(HostError::invalid_request(format!(
                "the request body is not valid: {e}"
            )))
        })
    }
}
