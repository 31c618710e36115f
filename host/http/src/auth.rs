//! Who may call a route, decided from the bearer token before anything else of the
//! request (its body above all) is read.
//!
//! Handlers state their access by taking an extractor: [`Operator`] for operator routes,
//! [`AgentOfPath`] for routes of one agent (`{agent}` in the path; the operator or that
//! agent's own token). axum runs these before the body extractor, so an unauthenticated
//! request is answered `401` without its body being buffered.

use crate::ApiError;
use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};

use connector_core::host::Host;
use connector_model::audit::Actor;
use connector_model::error::{ErrorCode, HostError};

/// Which callers a route admits.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// The operator only.
    Operator,
    /// The operator, or an agent token of this agent.
    Agent(&'a str),
}

/// The request's bearer token, if it sends one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Checks the request's bearer token against `access`: `401 unauthenticated` without a
/// valid token, `403 forbidden` for another agent's token.
pub fn authorize(host: &Host, headers: &HeaderMap, access: Access<'_>) -> Result<(), HostError> {
    let unauthenticated = || {
        HostError::new(
            ErrorCode::Unauthenticated,
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
                ErrorCode::Forbidden,
                "this agent token belongs to another agent",
            )),
            None => Err(unauthenticated()),
        },
    }
}

/// Who the request's bearer token names, for the audit log: the operator, or the agent
/// whose token it is. Call it on a request [`authorize`] let through; a request without
/// a valid token (which never gets that far) is put down to the host itself.
pub fn caller(host: &Host, headers: &HeaderMap) -> Actor {
    match bearer(headers) {
        Some(token) if host.is_operator_token(token) => Actor::operator(),
        Some(token) => host
            .agent_of_token(token)
            .map_or_else(Actor::host, |agent| Actor::agent(&agent)),
        None => Actor::host(),
    }
}

/// The actor a request acts as ([`caller`]); takes nothing from the request but its
/// headers, and refuses nothing (put it after the extractor that authorizes).
#[derive(Debug, Clone)]
pub struct Caller(pub Actor);

impl FromRequestParts<Host> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, ApiError> {
        Ok(Caller(caller(host, &parts.headers)))
    }
}

/// The caller holds the operator token.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

impl FromRequestParts<Host> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, ApiError> {
        Ok(authorize(host, &parts.headers, Access::Operator).map(|()| Operator)?)
    }
}

/// The `{agent}` of the route's path, when the caller is the operator or holds that
/// agent's token.
#[derive(Debug, Clone)]
pub struct AgentOfPath(pub String);

impl AgentOfPath {
    /// The `{agent}` path parameter, or `None` when the route has none.
    pub async fn agent_in_path(parts: &mut Parts) -> Option<String> {
        let params = RawPathParams::from_request_parts(parts, &()).await.ok()?;
        params
            .iter()
            .find(|(name, _)| *name == "agent")
            .map(|(_, value)| value.to_string())
    }
}

impl FromRequestParts<Host> for AgentOfPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, ApiError> {
        let Some(agent) = Self::agent_in_path(parts).await else {
            // Not a readable agent id (not UTF-8 once decoded): no agent's token can be
            // for it, and nobody learns more than the operator would.
            authorize(host, &parts.headers, Access::Operator)?;
            return Err(ApiError(HostError::invalid_request(
                "the agent id in the path is not valid UTF-8",
            )));
        };
        authorize(host, &parts.headers, Access::Agent(&agent))?;
        Ok(AgentOfPath(agent))
    }
}
