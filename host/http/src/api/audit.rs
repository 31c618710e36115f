//! `GET /audit` and `GET /audit/verify` (CONTRACT §9): the audit log, paged and
//! filtered, and the recomputation of its hash chain. Operator only.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

use super::{ok, ApiResult};
use crate::Operator;
use connector_core::audit::parse_audit_time;
use connector_core::host::{AuditQuery, Host};
use connector_model::audit::ActorKind;
use connector_model::error::HostError;

/// The most records one page holds.
pub const MAX_LIMIT: u32 = 1000;
/// Records per page when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 100;

/// The audit routes, at their full paths under `/api/v1`.
pub fn routes() -> Router<Host> {
    Router::new()
        .route("/api/v1/audit", get(list))
        .route("/api/v1/audit/verify", get(verify))
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Filters {
    after: Option<String>,
    limit: Option<String>,
    action: Option<String>,
    actor_kind: Option<String>,
    actor_id: Option<String>,
    target: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

impl Filters {
    fn query(self) -> Result<AuditQuery, HostError> {
        let after = match self.after.as_deref() {
            None | Some("") => 0,
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    HostError::invalid_request(format!(
                        "`after` must be a record's seq (a whole number from 0), not `{text}`"
                    ))
                })?,
        };
        let limit = match self.limit.as_deref() {
            None | Some("") => DEFAULT_LIMIT,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| {
                    HostError::invalid_request(format!(
                        "`limit` must be a whole number from 1 to {MAX_LIMIT}, not `{text}`"
                    ))
                })?,
        };
        let nonempty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let actor_kind = match nonempty(self.actor_kind) {
            None => None,
            Some(kind) if ActorKind::parse(&kind).is_some() => Some(kind),
            Some(kind) => {
                return Err(HostError::invalid_request(format!(
                "`actorKind` must be one of operator, console, agent, webhook, host, not `{kind}`"
            )))
            }
        };
        let time = |name: &str, v: Option<String>| {
            nonempty(v).map(|t| parse_audit_time(name, &t)).transpose()
        };
        Ok(AuditQuery {
            after,
            limit,
            action: nonempty(self.action),
            actor_kind,
            actor_id: nonempty(self.actor_id),
            target: nonempty(self.target),
            since: time("since", self.since)?,
            until: time("until", self.until)?,
        })
    }
}

async fn list(
    State(host): State<Host>,
    _: Operator,
    filters: Result<Query<Filters>, axum::extract::rejection::QueryRejection>,
) -> ApiResult {
    let Query(filters) = filters.map_err(|e| HostError::invalid_request(e.body_text()))?;
    ok(StatusCode::OK, &host.audit_records(filters.query()?).await?)
}

async fn verify(State(host): State<Host>, _: Operator) -> ApiResult {
    ok(StatusCode::OK, &host.verify_audit().await?)
}
