//! `GET /units` and `GET /agents` (CONTRACT §3): paged lists for operators.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::{ok, ApiResult};
use crate::Operator;
use connector_core::host::Host;
use connector_core::listing::{ParentFilter, MAX_PAGE};
use connector_model::error::HostError;
use connector_model::ids::truncate;

type QueryResult<T> = Result<Query<T>, axum::extract::rejection::QueryRejection>;

/// `limit` as the query gave it: read here so that a bad value gets a sentence of ours.
fn limit_of(raw: Option<&str>) -> Result<Option<u32>, HostError> {
    raw.map(|l| {
        l.parse::<u32>().map_err(|_| {
            HostError::invalid_request(format!(
                "`limit` must be a whole number between 1 and {MAX_PAGE}, not `{}`",
                truncate(l, 40)
            ))
        })
    })
    .transpose()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct UnitsQuery {
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<String>,
}

pub(super) async fn list_units(
    State(host): State<Host>,
    _: Operator,
    query: QueryResult<UnitsQuery>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| HostError::invalid_request(e.body_text()))?;
    let parent = match q.parent {
        None => ParentFilter::Any,
        Some(p) if p.is_empty() => ParentFilter::Roots,
        Some(p) => ParentFilter::Of(p),
    };
    let page = host.units_page(&parent, q.after.as_deref(), limit_of(q.limit.as_deref())?)?;
    ok(
        StatusCode::OK,
        &json!({"units": page.entries, "next": page.next}),
    )
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct AgentsQuery {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    after: Option<String>,
    #[serde(default)]
    limit: Option<String>,
}

pub(super) async fn list_agents(
    State(host): State<Host>,
    _: Operator,
    query: QueryResult<AgentsQuery>,
) -> ApiResult {
    let Query(q) = query.map_err(|e| HostError::invalid_request(e.body_text()))?;
    let page = host.agents_page(
        q.unit.as_deref(),
        q.after.as_deref(),
        limit_of(q.limit.as_deref())?,
    )?;
    ok(
        StatusCode::OK,
        &json!({"agents": page.entries, "next": page.next}),
    )
}
