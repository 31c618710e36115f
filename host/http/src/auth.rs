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

use connector_core::auth::Caller as TokenCaller;
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
    authenticate(host, headers, access).map(drop)
}

/// [`authorize`], answering who the token names ([`caller`]): the token is checked once
/// for both.
pub fn authenticate(
    host: &Host,
    headers: &HeaderMap,
    access: Access<'_>,
) -> Result<Actor, HostError> {
    let unauthenticated = || {
        HostError::new(
            ErrorCode::Unauthenticated,
            "missing or invalid bearer token: send `Authorization: Bearer <token>`",
        )
    };
    let token = bearer(headers).ok_or_else(unauthenticated)?;
    match (host.caller_of_token(token), access) {
        (Some(TokenCaller::Operator), _) => Ok(Actor::operator()),
        (Some(TokenCaller::Agent(owner)), Access::Agent(agent)) if owner == agent => {
            Ok(Actor::agent(&owner))
        }
        (Some(TokenCaller::Agent(_)), Access::Agent(_)) => Err(HostError::new(
            ErrorCode::Forbidden,
            "this agent token belongs to another agent",
        )),
        (Some(TokenCaller::Agent(_)), Access::Operator) | (None, _) => Err(unauthenticated()),
    }
}

/// Who the request's bearer token names, for the audit log: the operator, or the agent
/// whose token it is. Call it on a request [`authorize`] let through; a request without
/// a valid token (which never gets that far) is put down to the host itself.
pub fn caller(host: &Host, headers: &HeaderMap) -> Actor {
    match bearer(headers).and_then(|token| host.caller_of_token(token)) {
        Some(TokenCaller::Operator) => Actor::operator(),
        Some(TokenCaller::Agent(agent)) => Actor::agent(&agent),
        None => Actor::host(),
    }
}

/// The actor a request acts as ([`caller`]); reads nothing of the request but its
/// headers, and refuses nothing (put it after the extractor that authorizes). The
/// extractors that authorize ([`Operator`], [`AgentOfPath`]) leave the actor they
/// found in the request's extensions, and this takes it from there: the token is
/// checked once.
#[derive(Debug, Clone)]
pub struct Caller(pub Actor);

impl FromRequestParts<Host> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, ApiError> {
        if let Some(found) = parts.extensions.remove::<Caller>() {
            return Ok(found);
        }
        Ok(Caller(caller(host, &parts.headers)))
    }
}

/// The caller holds the operator token.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

impl FromRequestParts<Host> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, host: &Host) -> Result<Self, ApiError> {
        let actor = authenticate(host, &parts.headers, Access::Operator)?;
        parts.extensions.insert(Caller(actor));
        Ok(Operator)
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
        let actor = authenticate(host, &parts.headers, Access::Agent(&agent))?;
        parts.extensions.insert(Caller(actor));
        Ok(AgentOfPath(agent))
    }
}
