//! What an [`ErrorCode`] is on the wire of the HTTP API: its status, and the contract's
//! error body `{"error": {code, message, details?}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use connector_model::error::{ErrorCode, HostError};

/// The HTTP status of an error code (CONTRACT §3).
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthenticated | ErrorCode::InvalidSignature => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden
        | ErrorCode::ToolNotGranted
        | ErrorCode::SignatureRequired
        | ErrorCode::SignatureInvalid => StatusCode::FORBIDDEN,
        ErrorCode::NotFound | ErrorCode::UnknownTool => StatusCode::NOT_FOUND,
        ErrorCode::Cycle
        | ErrorCode::InvalidComponent
        | ErrorCode::InvalidConfig
        | ErrorCode::GithubAppNotConfigured
        | ErrorCode::InvalidArguments => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::HasChildren
        | ErrorCode::ConnectorInUse
        | ErrorCode::RotationBreaksBindings
        | ErrorCode::SlugConflict
        | ErrorCode::ToolDefinitionsChanged
        | ErrorCode::StateChanged => StatusCode::CONFLICT,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ErrorCode::ToolFailed
        | ErrorCode::ConnectorTrapped
        | ErrorCode::DeliveryFailed
        | ErrorCode::IntrospectionFailed
        | ErrorCode::RegistryFailed
        | ErrorCode::ContextFailed => StatusCode::BAD_GATEWAY,
        ErrorCode::ConnectorTimeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::StoreUnavailable | ErrorCode::HostBusy => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::ContextConflict | ErrorCode::ContextInvalid | ErrorCode::Internal => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// A [`HostError`] as the HTTP API answers it: its code's status and the contract's error
/// body. Handlers and extractors return it; `?` turns a `HostError` into one.
#[derive(Debug)]
pub struct ApiError(pub HostError);

impl From<HostError> for ApiError {
    fn from(error: HostError) -> Self {
        ApiError(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(e) = self;
        let mut error = json!({"code": e.code.as_str(), "message": e.message});
        if let Some(details) = e.details {
            error["details"] = details;
        }
        (status_of(e.code), Json(json!({ "error": error }))).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_4xx_and_failures_5xx() {
        for code in ErrorCode::ALL {
            let status = status_of(code);
            assert_eq!(
                code.is_rejection(),
                status.is_client_error(),
                "{code} is {status}"
            );
        }
    }

    #[test]
    fn the_body_has_the_contract_shape() {
        let response =
            ApiError(HostError::new(ErrorCode::Cycle, "loops").with_details(json!({"unit": "a"})))
                .into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 4096))
            .expect("body");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            body,
            json!({"error": {"code": "cycle", "message": "loops", "details": {"unit": "a"}}})
        );
    }
}
