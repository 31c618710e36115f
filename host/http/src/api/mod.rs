//! The HTTP API of CONTRACT.md §3, as an axum [`Router`].
//!
//! Handlers only translate: authenticate, parse the request, call one [`Host`] method,
//! serialise the answer. Every rule lives in the host, so the Rust API and the HTTP API
//! cannot disagree.

pub mod audit;
mod install;
mod lists;

use crate::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{AgentOfPath, ApiJson, Caller, Operator, PeerOf};
use connector_core::host::{Host, Written};
use connector_model::audit::Actor;
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::records::Subject;

type ApiResult = Result<Response, ApiError>;

fn written_status(w: Written) -> StatusCode {
    match w {
        Written::Created => StatusCode::CREATED,
        Written::Updated => StatusCode::OK,
    }
}

fn ok<T: serde::Serialize>(status: StatusCode, body: &T) -> ApiResult {
    Ok((status, Json(body)).into_response())
}

/// The routes of CONTRACT §3, at their full paths under `/api/v1`. Written out rather than
/// nested: a nested router wraps each of its routes in two more services (the prefix
/// stripped, the nested path set), which every request passes through.
pub fn routes() -> Router<Host> {
    Router::new()
        .route("/api/v1/webhooks/{slug}", post(receive_webhook))
        .route(
            "/api/v1/webhooks/{slug}/deliveries/{delivery}",
            get(get_delivery),
        )
        .route(
            "/api/v1/webhooks/{slug}/deliveries/{delivery}/retry",
            post(retry_delivery),
        )
        .route("/api/v1/units/{unit}/messages", get(list_messages))
        .route("/api/v1/units/{unit}/messages/stream", get(stream_messages))
        .route(
            "/api/v1/connectors",
            get(list_connectors).post(install::install_connector),
        )
        .route(
            "/api/v1/connectors/{slug}",
            get(get_connector).delete(delete_connector),
        )
        .route("/api/v1/units", get(lists::list_units))
        .route("/api/v1/agents", get(lists::list_agents))
        .route(
            "/api/v1/units/{unit}",
            put(put_unit).get(get_unit).delete(delete_unit),
        )
        .route("/api/v1/units/{unit}/connectors", get(list_bindings))
        .route(
            "/api/v1/units/{unit}/connectors/{slug}",
            put(bind).delete(unbind),
        )
        .route("/api/v1/units/{unit}/tools", get(unit_tools))
        .route("/api/v1/units/{unit}/grants", post(grant_unit))
        .route(
            "/api/v1/units/{unit}/grants/{target}",
            axum::routing::delete(revoke_unit),
        )
        .route(
            "/api/v1/agents/{agent}",
            put(put_agent).get(get_agent).delete(delete_agent),
        )
        .route("/api/v1/agents/{agent}/tokens", post(issue_token))
        .route("/api/v1/agents/{agent}/tokens/revoke", post(revoke_tokens))
        .route("/api/v1/agents/{agent}/tools", get(agent_tools))
        .route("/api/v1/agents/{agent}/grants", post(grant_agent))
        .route(
            "/api/v1/agents/{agent}/grants/{target}",
            axum::routing::delete(revoke_agent),
        )
        .route("/api/v1/agents/{agent}/image-tools", put(put_image_tools))
        .route(
            "/api/v1/agents/{agent}/image-tools/introspect",
            post(introspect_image_tools),
        )
        .route("/api/v1/agents/{agent}/tool-calls", post(call_tool))
        .route(
            "/api/v1/agents/{agent}/runtime-context",
            get(runtime_context),
        )
        .merge(audit::routes())
}

// ----- connectors ----------------------------------------------------------------

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ForceQuery {
    #[serde(default)]
    force: Option<String>,
}

impl ForceQuery {
    fn force(&self) -> Result<bool, HostError> {
        match self.force.as_deref() {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") | Some("") => Ok(true),
            Some(other) => Err(HostError::invalid_request(format!(
                "`force` must be true or false, not `{other}`"
            ))),
        }
    }
}

async fn list_connectors(State(host): State<Host>, _: Operator) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::OK,
        &json!({"connectors": host.list_connectors()}),
    )
}

async fn get_connector(
    State(host): State<Host>,
    _: Operator,
    Path(slug): Path<String>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(StatusCode::OK, host.connector(&slug)?.info())
}

async fn delete_connector(
    State(host): State<Host>,
    _: Operator,
    Path(slug): Path<String>,
    query: Result<Query<ForceQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let Query(query) = query.map_err(|e| HostError::invalid_request(e.body_text()))?;
    host.remove_connector(&slug, query.force()?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- units and agents ------------------------------------------------------------

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PutUnit {
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    display_name: Option<String>,
}

async fn put_unit(
    State(host): State<Host>,
    _: Operator,
    Path(unit): Path<String>,
    ApiJson(body): ApiJson<PutUnit>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let (view, written) = host
        .put_unit(&unit, body.parent.as_deref(), body.display_name.as_deref())
        .await?;
    ok(written_status(written), &view)
}

async fn get_unit(State(host): State<Host>, _: Operator, Path(unit): Path<String>) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(StatusCode::OK, &host.unit(&unit)?)
}

async fn delete_unit(State(host): State<Host>, _: Operator, Path(unit): Path<String>) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.delete_unit(&unit).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PutAgent {
    #[serde(default)]
    units: Vec<String>,
    #[serde(default)]
    display_name: Option<String>,
}

async fn put_agent(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<PutAgent>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let (view, written) = host
        .put_agent(&agent, &body.units, body.display_name.as_deref())
        .await?;
    ok(written_status(written), &view)
}

async fn get_agent(State(host): State<Host>, AgentOfPath(agent): AgentOfPath) -> ApiResult {
    ok(StatusCode::OK, &host.agent(&agent)?)
}

async fn delete_agent(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.delete_agent(&agent).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IssueToken {
    #[serde(default)]
    ttl_seconds: Option<u64>,
}

async fn issue_token(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<IssueToken>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::CREATED,
        &host.issue_agent_token(&agent, body.ttl_seconds).await?,
    )
}

async fn revoke_tokens(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.revoke_agent_tokens(&agent).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- bindings ---------------------------------------------------------------------

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PutBinding {
    #[serde(default)]
    config: Option<Value>,
}

async fn bind(
    State(host): State<Host>,
    _: Operator,
    Path((unit, slug)): Path<(String, String)>,
    ApiJson(body): ApiJson<PutBinding>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let config = body.config.unwrap_or_else(|| json!({}));
    let (view, written) = host.bind(&unit, &slug, config).await?;
    ok(written_status(written), &view)
}

async fn list_bindings(
    State(host): State<Host>,
    _: Operator,
    Path(unit): Path<String>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(StatusCode::OK, &json!({"bindings": host.bindings(&unit)?}))
}

async fn unbind(
    State(host): State<Host>,
    _: Operator,
    Path((unit, slug)): Path<(String, String)>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.unbind(&unit, &slug).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- effective tools and grants ---------------------------------------------------

async fn unit_tools(State(host): State<Host>, _: Operator, Path(unit): Path<String>) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::OK,
        &json!({"tools": &*host.effective_tools(&Subject::Unit(unit))?}),
    )
}

async fn agent_tools(State(host): State<Host>, AgentOfPath(agent): AgentOfPath) -> ApiResult {
    ok(
        StatusCode::OK,
        &json!({"tools": &*host.effective_tools(&Subject::Agent(agent))?}),
    )
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    #[serde(default)]
    tool: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl GrantBody {
    fn target(self) -> Result<String, HostError> {
        match (self.tool, self.namespace) {
            (Some(t), None) => Ok(t),
            (None, Some(ns)) => Ok(ns),
            _ => Err(HostError::invalid_request(
                "give exactly one of `tool` or `namespace`",
            )),
        }
    }
}

async fn grant_unit(
    State(host): State<Host>,
    _: Operator,
    Path(unit): Path<String>,
    ApiJson(body): ApiJson<GrantBody>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::CREATED,
        &host.grant(Subject::Unit(unit), &body.target()?).await?,
    )
}

async fn grant_agent(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<GrantBody>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::CREATED,
        &host.grant(Subject::Agent(agent), &body.target()?).await?,
    )
}

async fn revoke_unit(
    State(host): State<Host>,
    _: Operator,
    Path((unit, target)): Path<(String, String)>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.revoke(Subject::Unit(unit), &target).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn revoke_agent(
    State(host): State<Host>,
    _: Operator,
    Path((agent, target)): Path<(String, String)>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    host.revoke(Subject::Agent(agent), &target).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ImageTools {
    #[serde(default)]
    digest: String,
    #[serde(default)]
    tools: Value,
}

async fn put_image_tools(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<ImageTools>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::OK,
        &host
            .put_image_tools(&agent, &body.digest, body.tools)
            .await?,
    )
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Introspect {
    #[serde(default)]
    url: String,
}

async fn introspect_image_tools(
    State(host): State<Host>,
    _: Operator,
    Path(agent): Path<String>,
    ApiJson(body): ApiJson<Introspect>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(
        StatusCode::OK,
        &host.introspect_image_tools(&agent, &body.url).await?,
    )
}

// ----- tool calls ---------------------------------------------------------------------

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    #[serde(default)]
    tool: String,
    #[serde(default)]
    arguments: Option<Value>,
}

async fn call_tool(
    State(host): State<Host>,
    AgentOfPath(agent): AgentOfPath,
    Caller(actor): Caller,
    ApiJson(body): ApiJson<ToolCall>,
) -> ApiResult {
    let host = host.acting_as(actor);
    if body.tool.is_empty() {
        return Err(ApiError(HostError::invalid_request("`tool` is required")));
    }
    let arguments = body.arguments.unwrap_or_else(|| json!({}));
    let output = host.call_tool(&agent, &body.tool, arguments).await?;
    ok(StatusCode::OK, &output)
}

// ----- webhooks and unit messages -----------------------------------------------------

async fn receive_webhook(
    State(host): State<Host>,
    PeerOf(peer): PeerOf,
    Path(slug): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult {
    // Nothing is buffered for a slug that takes no webhooks, for headers that cannot
    // verify, or past the limit; the body is read within its sender's share of what
    // the host reads at once, and given up when that share is needed by others.
    let admission = host.admit_webhook(&slug, &headers, peer.map(|p| p.addr()))?;
    let limit = admission.limit();
    let cut_off = admission.cut_off();
    let read = read_body_counted(&headers, body, limit, "the webhook body", |seen| {
        admission.take(seen)
    });
    let body = tokio::select! {
        read = tokio::time::timeout(connector_core::webhooks::WEBHOOK_BODY_TIME, read) => match read {
            Ok(read) => read?,
            Err(_) => {
                return Err(ApiError(HostError::new(
                    ErrorCode::RequestTimeout,
                    format!(
                        "the webhook body did not arrive within {} s; send it at once",
                        connector_core::webhooks::WEBHOOK_BODY_TIME.as_secs()
                    ),
                )))
            }
        },
        () = cut_off => return Err(ApiError(HostError::new(
            ErrorCode::HostBusy,
            "the host is reading more webhook bodies from this sender than its share allows while others wait; retry shortly",
        ))),
    };
    let outcome = host.receive_webhook(&slug, &headers, &body).await?;
    drop(admission);
    ok(
        StatusCode::ACCEPTED,
        &connector_core::webhooks::outcome_json(&outcome),
    )
}

/// Reads a request body of at most `limit` bytes. Past it — a declared length at once,
/// an undeclared one as soon as the limit is passed — nothing more is kept: the rest is
/// drained (bounded, see [`crate::read_limited`]) so the client reads the `413`.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize, what: &str) -> HostResult<Bytes> {
    read_body_counted(headers, body, limit, what, |_| std::future::ready(true)).await
}

/// Like [`read_body`], asking `room(bytes so far)` as each part arrives whether the host
/// may hold that much (`503 host_busy` when not).
async fn read_body_counted<R>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
    room: impl FnMut(u64) -> R,
) -> HostResult<Bytes>
where
    R: std::future::Future<Output = bool>,
{
    let too_large = || {
        HostError::new(
            ErrorCode::PayloadTooLarge,
            format!("{what} is larger than the limit of {limit} bytes"),
        )
    };
    crate::read_limited_counted(headers, body, limit, room)
        .await
        .map_err(|e| e.into_host_error(too_large))
}

async fn get_delivery(
    State(host): State<Host>,
    _: Operator,
    Path((slug, delivery)): Path<(String, String)>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    ok(StatusCode::OK, &host.delivery(&slug, &delivery).await?)
}

async fn retry_delivery(
    State(host): State<Host>,
    _: Operator,
    Path((slug, delivery)): Path<(String, String)>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let outcome = host.retry_delivery(&slug, &delivery).await?;
    ok(
        StatusCode::OK,
        &connector_core::webhooks::outcome_json(&outcome),
    )
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MessagesQuery {
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
}

async fn list_messages(
    State(host): State<Host>,
    _: Operator,
    Path(unit): Path<String>,
    query: Result<Query<MessagesQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    let Query(query) = query.map_err(|e| HostError::invalid_request(e.body_text()))?;
    ok(
        StatusCode::OK,
        &host
            .messages(&unit, query.after.as_deref(), query.limit)
            .await?,
    )
}

async fn stream_messages(
    State(host): State<Host>,
    _: Operator,
    headers: HeaderMap,
    Path(unit): Path<String>,
) -> ApiResult {
    let host = host.acting_as(Actor::operator());
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let stream = host.subscribe(&unit, last_event_id.as_deref())?;
    let events = stream.map(|m| {
        let data = serde_json::to_string(&m).unwrap_or_default();
        Ok::<_, std::convert::Infallible>(Event::default().id(m.cursor.to_string()).data(data))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

// ----- runtime context ----------------------------------------------------------------

async fn runtime_context(State(host): State<Host>, AgentOfPath(agent): AgentOfPath) -> ApiResult {
    ok(StatusCode::OK, &host.runtime_context(&agent).await?)
}
