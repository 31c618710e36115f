//! `POST /connectors` (CONTRACT.md §3 and §10): a component's bytes (`application/wasm`)
//! or `{"source": "oci://…"}` (`application/json`), installed or rotated; the answer is
//! the `Connector` with the rotation's `toolChanges`.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::{ok, read_body, written_status, ApiResult};
use crate::{ApiError, Operator};
use connector_core::host::{ComponentSource, Host, InstallOptions, InstallRequest, Installed};
use connector_core::sources::MAX_COMPONENT_BYTES;
use connector_model::audit::Actor;
use connector_model::error::{ErrorCode, HostError};

/// Largest JSON body naming a source.
const MAX_SOURCE_BODY: usize = 16 * 1024;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct InstallQuery {
    #[serde(default)]
    force: Option<String>,
    #[serde(default, rename = "acceptToolChanges")]
    accept_tool_changes: Option<String>,
}

fn flag(name: &str, value: Option<&str>) -> Result<bool, HostError> {
    match value {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(other) => Err(HostError::invalid_request(format!(
            "`{name}` must be true or false, not `{other}`"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceBody {
    source: String,
}

pub(super) async fn install_connector(
    State(host): State<Host>,
    _: Operator,
    headers: HeaderMap,
    query: Result<Query<InstallQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let Query(query) = query.map_err(|e| HostError::invalid_request(e.body_text()))?;
    let options = InstallOptions {
        force: flag("force", query.force.as_deref())?,
        accept_tool_changes: flag("acceptToolChanges", query.accept_tool_changes.as_deref())?,
    };
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let source = if content_type.starts_with("application/wasm")
        || content_type.starts_with("application/octet-stream")
    {
        let body = read_body(&headers, body, MAX_COMPONENT_BYTES, "a component").await?;
        ComponentSource::Upload(body.to_vec().into())
    } else if content_type.starts_with("application/json") {
        let body = read_body(&headers, body, MAX_SOURCE_BODY, "a source").await?;
        let parsed: SourceBody = serde_json::from_slice(&body).map_err(|e| {
            HostError::invalid_request(format!(
                "the body must be {{\"source\": \"oci://<registry>/<repository>:<tag>\"}}: {e}"
            ))
        })?;
        ComponentSource::Registry(parsed.source)
    } else {
        return Err(ApiError(HostError::new(
            ErrorCode::UnsupportedMediaType,
            "send the component's bytes with Content-Type: application/wasm, or {\"source\": \"oci://…\"} with Content-Type: application/json",
        )));
    };
    let installed = host.install(InstallRequest { source, options }).await?;
    ok(written_status(installed.written), &answer(&installed))
}

/// The `Connector` with `toolChanges`.
pub(crate) fn answer(installed: &Installed) -> Value {
    let mut body = serde_json::to_value(&installed.connector).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut body {
        map.insert(
            "toolChanges".into(),
            serde_json::to_value(&installed.tool_changes).unwrap_or(Value::Array(vec![])),
        );
    }
    body
}
