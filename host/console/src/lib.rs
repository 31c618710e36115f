//! The operator console (CONTRACT §7): web pages at `/console` for what the HTTP API
//! does — units as a tree with their bindings, a unit's or agent's **Tools** view,
//! binding forms generated from a connector's `configSchema`, agents and their tokens,
//! connectors with their tools, webhook deliveries with a retry button, and a unit's
//! inbox, live. Destructive actions ask first on a page of their own, and every change
//! ends with a redirect to a page that says what happened ([`actions`]).
//!
//! Why it is built this way:
//! - **A view, not a second host.** Every handler authenticates, parses a form, calls one
//!   [`Host`] method (the same the HTTP API calls) and renders the answer. Rules — what
//!   a bind grants, what an agent inherits, what a secret is — live in the host only.
//! - **Server-rendered HTML from templates compiled into the binary** (`maud`: checked
//!   at compile time, every interpolated string escaped, no build tool for `cargo
//!   build`). Every page works without scripts; the one script (`assets/console.js`,
//!   served from this origin) only adds the live inbox and small conveniences. The CSS
//!   and script are `include_str!`ed, so the binary serves everything the page loads and
//!   the Content-Security-Policy can forbid any other origin.
//! - **Sessions, not the token in the browser.** Signing in with the operator token
//!   starts a server-side session ([`session`]); the browser holds only an `HttpOnly`,
//!   `SameSite=Strict` cookie. Every state-changing request carries the session's CSRF
//!   token, and one whose `Origin` or `Sec-Fetch-Site` says it comes from elsewhere is
//!   refused before that.
//!
//! When it runs: mounted by [`connector_http::server::router`] next to the API, inside the same
//! host-name check and replica catch-up. What it may touch: the [`Host`] methods and its
//! own session table; never the store, the operator token (beyond checking it at
//! sign-in) or a secret config value (binding configs are shown with every write-only
//! value masked, at any depth, by [`form::masked`]; a mask sent back keeps the stored
//! value). Wrong operator tokens at sign-in are braked per remote address
//! ([`session::SignInBrake`]), never the right one.

pub mod actions;
mod audit;
mod edit;
pub mod form;
pub mod markdown;
pub mod pages;
pub mod session;
mod trust;

use connector_model::audit::Actor;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use futures::StreamExt;
use maud::Markup;
use serde::Deserialize;

use connector_core::host::{Host, Message};
use connector_http::PeerOf;
use connector_model::error::{ErrorCode, HostError};
use connector_model::records::{DeliveryStatus, Subject};
use pages::{href, notice};
use session::{Session, Sessions};

/// The Content-Security-Policy of every console response: nothing from other origins,
/// no inline script or style, no framing, forms post only here.
pub const CSP: &str = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// Largest component the upload form takes (as `POST /api/v1/connectors`).
const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;
/// Deliveries listed per connector.
const DELIVERIES_SHOWN: u32 = 100;
/// Messages per inbox page.
const INBOX_PAGE: u32 = 100;

/// The console's routes, to be nested at `/console`. Each call has its own session
/// table: sessions belong to this process (a restart signs operators out).
pub fn routes() -> Router<Host> {
    let sessions = Arc::new(Sessions::default());
    Router::new()
        .route("/", get(home))
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        .route("/sign-in", get(sign_in_form).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/audit", get(audit::audit))
        .route("/units", get(units).post(put_unit))
        .route("/units/{unit}", get(unit))
        .route("/units/{unit}/tools", get(unit_tools))
        .route(
            "/units/{unit}/delete",
            get(actions::confirm_delete_unit).post(delete_unit),
        )
        .route("/units/{unit}/bind", get(bind_form_query))
        .route("/units/{unit}/bind/{slug}", get(bind_form).post(bind))
        .route(
            "/units/{unit}/unbind/{slug}",
            get(actions::confirm_unbind).post(unbind),
        )
        .route("/units/{unit}/grants", post(actions::grant_to_unit))
        .route(
            "/units/{unit}/grants/{target}/revoke",
            get(actions::confirm_revoke_unit_grant).post(actions::revoke_unit_grant),
        )
        .route("/units/{unit}/inbox", get(inbox))
        .route("/units/{unit}/inbox/stream", get(inbox_stream))
        .route("/agents", get(agents).post(put_agent))
        .route("/agents/{agent}", get(agent))
        .route("/agents/{agent}/tools", get(agent_tools))
        .route("/agents/{agent}/tokens", post(mint_token))
        .route(
            "/agents/{agent}/tokens/revoke",
            get(actions::confirm_revoke_tokens).post(revoke_tokens),
        )
        .route(
            "/agents/{agent}/delete",
            get(actions::confirm_delete_agent).post(delete_agent),
        )
        .route("/agents/{agent}/grants", post(actions::grant_to_agent))
        .route(
            "/agents/{agent}/image-tools",
            post(actions::put_image_tools),
        )
        .route(
            "/agents/{agent}/image-tools/introspect",
            post(actions::introspect_image_tools),
        )
        .route(
            "/agents/{agent}/grants/{target}/revoke",
            get(actions::confirm_revoke_agent_grant).post(actions::revoke_agent_grant),
        )
        .route(
            "/connectors",
            get(connectors)
                .post(upload)
                .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES + 64 * 1024)),
        )
        .route("/connectors/pull", post(pull))
        .route("/connectors/{slug}", get(connector))
        .route(
            "/connectors/{slug}/remove",
            get(actions::confirm_remove_connector).post(actions::remove_connector),
        )
        .route("/connectors/{slug}/deliveries", get(deliveries))
        .route(
            "/connectors/{slug}/deliveries/{delivery}",
            get(actions::delivery),
        )
        .route(
            "/connectors/{slug}/deliveries/{delivery}/retry",
            post(retry_delivery),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn(actions::show_notice))
        .layer(axum::middleware::from_fn(same_origin_posts))
        .layer(axum::middleware::map_response(security_headers))
        .layer(Extension(sessions))
        .layer(Extension(Arc::new(session::SignInBrake::default())))
}

// ----- responses ---------------------------------------------------------------------

/// An HTML page with `status`.
pub(crate) fn html(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

pub(crate) fn see_other(location: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

/// A host error as an HTML page with the status the API would answer.
pub(crate) fn error_response(csrf: Option<&str>, e: &HostError) -> Response {
    let status = connector_http::status_of(e.code);
    let title = match e.code {
        ErrorCode::NotFound => "Not found",
        ErrorCode::InvalidRequest => "Invalid request",
        _ if status.is_server_error() => "The host could not do that",
        _ => "Refused",
    };
    html(status, pages::error_page(csrf, title, &e.message))
}

async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// Refuses a state-changing request whose browser says it comes from another site or
/// origin, before anything else of it is read.
async fn same_origin_posts(request: Request, next: Next) -> Response {
    if let Some(why) = session::cross_site_refusal(request.method(), request.headers()) {
        return html(
            StatusCode::FORBIDDEN,
            pages::error_page(
                None,
                "Cross-site request refused",
                &format!("{why}; submit the form from the console itself."),
            ),
        );
    }
    next.run(request).await
}

async fn not_found() -> Response {
    html(
        StatusCode::NOT_FOUND,
        pages::error_page(None, "Not found", "There is no console page here."),
    )
}

async fn method_not_allowed(method: Method) -> Response {
    let mut response = html(
        StatusCode::METHOD_NOT_ALLOWED,
        pages::error_page(
            None,
            "Method not allowed",
            &format!(
                "this console page does not take {method}; follow the console's own links and forms"
            ),
        ),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// What a create-or-update did, in words.
fn written_word(w: connector_core::host::Written) -> &'static str {
    match w {
        connector_core::host::Written::Created => "is created",
        connector_core::host::Written::Updated => "is updated",
    }
}

// ----- sessions ----------------------------------------------------------------------

/// A signed-in request, and the host acting as its session: every change a handler makes
/// through [`SignedIn::host`] is recorded with the session as its actor (CONTRACT §9), so
/// no handler can forget to say who acts. A request without a live session is sent to the
/// sign-in page (a `GET`) or refused (anything else).
pub struct SignedIn(Session, Host);

impl axum::extract::FromRequestParts<Host> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        host: &Host,
    ) -> Result<Self, Response> {
        let sessions = parts
            .extensions
            .get::<Arc<Sessions>>()
            .cloned()
            .ok_or_else(|| {
                html(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    pages::error_page(
                        None,
                        "Console unavailable",
                        "the console has no session table",
                    ),
                )
            })?;
        match session::cookie_id(&parts.headers).and_then(|id| sessions.get(id)) {
            Some(s) => {
                // The session's id is its cookie, a secret: the audit log names it by a
                // digest that cannot be turned back into the cookie.
                let digest = session::cookie_id(&parts.headers).map(session_name);
                Ok(SignedIn(s, host.acting_as(Actor::console(digest))))
            }
            None if parts.method == Method::GET || parts.method == Method::HEAD => {
                Err(see_other("/console/sign-in"))
            }
            None => Err(html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(Some("Your session has ended (or you never signed in): sign in again, then repeat what you were doing.")),
            )),
        }
    }
}

/// How the audit log names the session whose cookie is `id`: a digest that cannot be
/// turned back into the cookie (the cookie is the session's secret).
fn session_name(id: &str) -> String {
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..6])
}

impl SignedIn {
    /// The host, acting as this session.
    fn host(&self) -> &Host {
        &self.1
    }

    fn csrf(&self) -> &str {
        &self.0.csrf
    }

    /// Ends a change (post/redirect/get): leaves `notice` — what happened — for the page
    /// at `location`, and redirects the browser there, so a reload repeats nothing.
    fn done(&self, location: &str, notice: Markup) -> Response {
        self.0.leave_notice(notice.into_string());
        see_other(location)
    }

    /// Checks the CSRF token a form sent: `403` when it is not this session's.
    fn check(&self, sent: Option<&str>) -> Result<(), Box<Response>> {
        if self.0.csrf_matches(sent.unwrap_or("")) {
            Ok(())
        } else {
            Err(Box::new(html(
                StatusCode::FORBIDDEN,
                pages::error_page(
                    Some(self.csrf()),
                    "Request refused",
                    "the form's CSRF token is missing or is not this session's; reload the page and submit it again",
                ),
            )))
        }
    }
}

/// A submitted form as its (name, value) pairs, in order.
pub(crate) struct Fields(Vec<(String, String)>);

impl Fields {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The trimmed, non-empty value of `name`.
    pub(crate) fn text(&self, name: &str) -> Option<&str> {
        self.get(name).map(str::trim).filter(|v| !v.is_empty())
    }
}

/// Reads an urlencoded form, answering `400` (as a page) when it is not one.
pub(crate) type FormResult =
    Result<Form<Vec<(String, String)>>, axum::extract::rejection::FormRejection>;

pub(crate) fn fields(s: &SignedIn, form: FormResult) -> Result<Fields, Box<Response>> {
    match form {
        Ok(Form(pairs)) => {
            let f = Fields(pairs);
            s.check(f.get("csrf"))?;
            Ok(f)
        }
        Err(e) => Err(Box::new(html(
            StatusCode::BAD_REQUEST,
            pages::error_page(Some(s.csrf()), "Invalid form", &e.body_text()),
        ))),
    }
}

async fn home(Extension(sessions): Extension<Arc<Sessions>>, headers: HeaderMap) -> Response {
    match session::cookie_id(&headers).and_then(|id| sessions.get(id)) {
        Some(_) => see_other("/console/units"),
        None => see_other("/console/sign-in"),
    }
}

async fn sign_in_form() -> Response {
    html(StatusCode::OK, pages::sign_in(None))
}

#[derive(Deserialize)]
struct SignInForm {
    #[serde(default)]
    token: String,
}

async fn sign_in(
    State(host): State<Host>,
    Extension(sessions): Extension<Arc<Sessions>>,
    Extension(brake): Extension<Arc<session::SignInBrake>>,
    PeerOf(peer): PeerOf,
    request_headers: HeaderMap,
    uri: axum::http::Uri,
    form: Result<Form<SignInForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    // A braked address waits for its turn before its token is looked at, so hanging up
    // early tells a guesser nothing; the right token then signs in all the same.
    let turn = brake.turn(peer);
    if let Some(turn) = turn {
        tokio::time::sleep_until(tokio::time::Instant::from_std(turn)).await;
    }
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    if token.is_empty() || !host.is_operator_token(token.trim()) {
        let braked_for = brake.failed(peer);
        let from = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
        if turn.is_none() {
            if braked_for.is_some() {
                tracing::warn!(
                    "console sign-in refused: wrong operator token; sign-ins from {from} are \
                     braked after too many wrong tokens"
                );
            } else {
                tracing::info!("console sign-in refused: wrong operator token from {from}");
            }
            return html(
                StatusCode::UNAUTHORIZED,
                pages::sign_in(Some("That is not the operator token.")),
            );
        }
        tracing::warn!(
            "console sign-in refused: another wrong operator token from {from}, which is braked"
        );
        let seconds = braked_for
            .map_or(1, |d| d.as_secs_f64().ceil() as u64)
            .max(1);
        let mut response = html(
            StatusCode::TOO_MANY_REQUESTS,
            pages::sign_in(Some(&format!(
                "That is not the operator token either. Too many wrong tokens came from your \
                 address lately, so its sign-ins are answered one at a time, {} seconds apart, \
                 for the next {seconds} seconds; the right token still signs in.",
                session::SIGN_IN_REFILL.as_secs()
            ))),
        );
        if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return response;
    }
    let (id, _) = sessions.start();
    // A sign-in that cannot be recorded does not happen.
    if let Err(e) = host.record_console_session(&session_name(&id), true).await {
        sessions.end(&id);
        return error_response(None, &e);
    }
    let secure = session::over_tls(&request_headers, &uri);
    let mut response = see_other("/console/units");
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(&id, secure)) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

async fn sign_out(
    s: SignedIn,
    Extension(sessions): Extension<Arc<Sessions>>,
    request_headers: HeaderMap,
    uri: axum::http::Uri,
    form: FormResult,
) -> Response {
    let host = s.host();
    if let Err(r) = fields(&s, form) {
        return *r;
    }
    if let Some(id) = session::cookie_id(&request_headers) {
        sessions.end(id);
        // The session has ended whether or not its record could be written.
        if let Err(e) = host.record_console_session(&session_name(id), false).await {
            tracing::warn!(error = %e, "cannot record a console sign-out in the audit log");
        }
    }
    let mut response = see_other("/console/sign-in");
    let secure = session::over_tls(&request_headers, &uri);
    if let Ok(v) = HeaderValue::from_str(&session::clear_cookie(secure)) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}

// ----- units -------------------------------------------------------------------------

fn units_page(host: &Host, s: &SignedIn, status: StatusCode) -> Response {
    let list = host.list_units();
    let mut bound: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for b in host.all_bindings() {
        bound.entry(b.unit_id).or_default().push(b.connector);
    }
    for slugs in bound.values_mut() {
        slugs.sort();
    }
    html(status, pages::units(s.csrf(), &list, &bound))
}

async fn units(s: SignedIn) -> Response {
    let host = s.host();
    units_page(host, &s, StatusCode::OK)
}

async fn put_unit(s: SignedIn, form: FormResult) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let id = f.text("id").unwrap_or("");
    match host
        .put_unit(id, f.text("parent"), f.text("displayName"))
        .await
    {
        Ok((_, written)) => s.done(
            &href(&["units", id]),
            notice("ok", &format!("Unit `{id}` {}.", written_word(written))),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

fn unit_page(host: &Host, s: &SignedIn, id: &str, message: Option<Markup>) -> Response {
    let view = match host.unit(id) {
        Ok(v) => v,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let all_units = host.list_units();
    let agents = host.list_agents();
    let connectors = host.list_connectors();
    let overview = pages::UnitOverview {
        id: &view.id,
        parent: view.parent.as_deref(),
        display_name: view.display_name.as_deref(),
        children: all_units
            .iter()
            .filter(|u| u.parent.as_deref() == Some(id))
            .map(|u| u.id.as_str())
            .collect(),
        bindings: &view.bindings,
        connectors: &connectors,
        agents: agents
            .iter()
            .filter(|a| a.units.iter().any(|u| u == id))
            .map(|a| a.id.as_str())
            .collect(),
        parent_choices: pages::tree_order(&all_units)
            .into_iter()
            .filter(|(_, u)| !below_or_self(&all_units, &u.id, id))
            .map(|(depth, u)| (depth, u.id.as_str()))
            .collect(),
    };
    html(StatusCode::OK, pages::unit(s.csrf(), &overview, message))
}

/// Whether `unit` is `root` or below it (a parent `root` cannot move under).
fn below_or_self(units: &[connector_model::records::UnitRecord], unit: &str, root: &str) -> bool {
    let mut current = Some(unit);
    // A parent chain is at most as long as the unit list.
    for _ in 0..=units.len() {
        match current {
            Some(u) if u == root => return true,
            Some(u) => {
                current = units
                    .iter()
                    .find(|r| r.id == u)
                    .and_then(|r| r.parent.as_deref())
            }
            None => return false,
        }
    }
    false
}

async fn unit(s: SignedIn, Path(id): Path<String>) -> Response {
    let host = s.host();
    unit_page(host, &s, &id, None)
}

/// A Tools page's query: `q` searches the tools.
#[derive(Deserialize)]
struct ToolsQuery {
    #[serde(default)]
    q: String,
}

async fn unit_tools(
    s: SignedIn,
    Path(id): Path<String>,
    query: Result<Query<ToolsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    let q = query.map(|Query(q)| q.q).unwrap_or_default();
    match tools_page(host, s.csrf(), &Subject::Unit(id), &q) {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

/// The Tools page of a unit or agent (what `/console/{units,agents}/{id}/tools` shows).
/// `query` searches the tools (their ids and descriptions).
pub fn tools_page(
    host: &Host,
    csrf: &str,
    subject: &Subject,
    query: &str,
) -> Result<Markup, HostError> {
    let grants = host.explicit_grants(subject);
    let grantable = actions::grantable(host);
    let extras = pages::ToolsExtras {
        grants: &grants,
        grantable: &grantable,
        query,
    };
    match subject {
        Subject::Unit(id) => {
            host.unit(id)?;
            let tools = host.effective_tools(subject)?;
            Ok(pages::unit_tools_with(csrf, id, &tools, &extras))
        }
        Subject::Agent(id) => {
            let tools = host.effective_tools(subject)?;
            Ok(pages::agent_tools_with(csrf, id, &tools, &extras))
        }
    }
}

async fn delete_unit(s: SignedIn, Path(id): Path<String>, form: FormResult) -> Response {
    let host = s.host();
    if let Err(r) = fields(&s, form) {
        return *r;
    }
    match host.delete_unit(&id).await {
        Ok(()) => s.done(
            "/console/units",
            notice(
                "ok",
                &format!(
                    "Unit `{id}` is deleted; its bindings were unbound and their grants revoked."
                ),
            ),
        ),
        Err(e) => s.done(
            &href(&["units", &id]),
            notice(
                "error",
                &format!("Unit `{id}` was not deleted: {}", e.message),
            ),
        ),
    }
}

#[derive(Deserialize)]
struct ConnectorQuery {
    #[serde(default)]
    connector: String,
}

async fn bind_form_query(
    s: SignedIn,
    Path(unit): Path<String>,
    query: Result<Query<ConnectorQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    match query {
        Ok(Query(q)) if !q.connector.is_empty() => {
            see_other(&href(&["units", &unit, "bind", &q.connector]))
        }
        _ => html(
            StatusCode::BAD_REQUEST,
            pages::error_page(
                Some(s.csrf()),
                "Invalid request",
                "choose a connector to bind",
            ),
        ),
    }
}

async fn bind_form(s: SignedIn, Path((unit, slug)): Path<(String, String)>) -> Response {
    let host = s.host();
    let connector = match host.connector(&slug) {
        Ok(c) => c,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    if let Err(e) = host.bindings(&unit) {
        return error_response(Some(s.csrf()), &e);
    }
    let current = shown_config(host, &unit, &slug, &connector.info().config_schema);
    html(
        StatusCode::OK,
        pages::bind_form(
            s.csrf(),
            &unit,
            connector.info(),
            current.as_ref(),
            None,
            &[],
        ),
    )
}

/// The stored config of `unit`'s binding of `slug` (to hand back to the host, never to
/// render).
fn stored_config(host: &Host, unit: &str, slug: &str) -> Option<serde_json::Value> {
    host.all_bindings()
        .into_iter()
        .find(|b| b.unit_id == unit && b.connector == slug)
        .map(|b| b.config)
}

/// The config of `unit`'s binding of `slug` as the form shows it: every write-only
/// value, at any depth, masked.
fn shown_config(
    host: &Host,
    unit: &str,
    slug: &str,
    schema: &serde_json::Value,
) -> Option<serde_json::Value> {
    stored_config(host, unit, slug).map(|c| form::masked(schema, &c))
}

async fn bind(
    s: SignedIn,
    Path((unit, slug)): Path<(String, String)>,
    form: FormResult,
) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let connector = match host.connector(&slug) {
        Ok(c) => c,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let info = connector.info();
    // A secret left empty (or sent back as the mask) keeps the stored value: read from
    // the stored binding here and handed straight back to the host, never rendered.
    let stored = stored_config(host, &unit, &slug);
    let masked = stored
        .as_ref()
        .map(|c| form::masked(&info.config_schema, c));
    let config = match form::config_from_form(&info.config_schema, &f.0, stored.as_ref()) {
        Ok(c) => c,
        Err(errors) => {
            return html(
                StatusCode::UNPROCESSABLE_ENTITY,
                pages::bind_form(s.csrf(), &unit, info, masked.as_ref(), Some(&f.0), &errors),
            )
        }
    };
    let rebind = stored.is_some();
    match host.bind(&unit, &slug, config).await {
        Ok(_) => s.done(
            &href(&["units", &unit]),
            notice(
                "ok",
                &if rebind {
                    format!("The binding of `{slug}` on unit `{unit}` now has the new configuration.")
                } else {
                    format!("Bound `{slug}` on unit `{unit}`: its tools are granted to the unit, its descendants and their agents.")
                },
            ),
        ),
        Err(e) if e.code == ErrorCode::InvalidConfig => {
            let errors = form::errors_from_details(e.details.as_ref(), &e.message);
            html(
                StatusCode::UNPROCESSABLE_ENTITY,
                pages::bind_form(s.csrf(), &unit, info, masked.as_ref(), Some(&f.0), &errors),
            )
        }
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn unbind(
    s: SignedIn,
    Path((unit, slug)): Path<(String, String)>,
    form: FormResult,
) -> Response {
    let host = s.host();
    if let Err(r) = fields(&s, form) {
        return *r;
    }
    match host.unbind(&unit, &slug).await {
        Ok(()) => s.done(
            &href(&["units", &unit, "tools"]),
            notice(
                "ok",
                &format!(
                    "Unbound `{slug}` from unit `{unit}`; the grants of that binding are revoked."
                ),
            ),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

#[derive(Deserialize)]
struct AfterQuery {
    #[serde(default)]
    after: Option<String>,
}

#[derive(Deserialize)]
struct BeforeQuery {
    #[serde(default)]
    before: Option<i64>,
}

/// The newest [`INBOX_PAGE`] messages of `unit` with a cursor below `before` (all when
/// `None`), newest first, and whether older ones exist (read newest first from the
/// store's index: one more than a page says so).
async fn newest_messages(
    host: &Host,
    unit: &str,
    before: Option<i64>,
) -> Result<(Vec<Message>, bool), HostError> {
    let mut page = host.newest_messages(unit, before, INBOX_PAGE + 1).await?;
    let older = page.len() > INBOX_PAGE as usize;
    page.truncate(INBOX_PAGE as usize);
    Ok((page, older))
}

async fn inbox(
    s: SignedIn,
    Path(unit): Path<String>,
    query: Result<Query<BeforeQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    let before = query.ok().and_then(|Query(q)| q.before);
    if let Err(e) = host.unit(&unit) {
        return error_response(Some(s.csrf()), &e);
    }
    match newest_messages(host, &unit, before).await {
        Ok((messages, older)) => html(
            StatusCode::OK,
            pages::inbox_newest_first(s.csrf(), &unit, &messages, before, older),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

/// The unit's message stream (the API's SSE stream), for the inbox page's script: one
/// event per message, its data the row's cells as JSON. The stream ends, sending nothing
/// more, once its session has ended (sign-out or expiry).
async fn inbox_stream(
    s: SignedIn,
    Extension(sessions): Extension<Arc<Sessions>>,
    Path(unit): Path<String>,
    headers: HeaderMap,
    query: Result<Query<AfterQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    use axum::response::sse::{Event, KeepAlive, Sse};
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| query.ok().and_then(|Query(q)| q.after));
    let stream = match host.subscribe(&unit, after.as_deref()) {
        Ok(s) => s,
        Err(e) => return error_response(None, &e),
    };
    // The extractor found this cookie's session live.
    let id = session::cookie_id(&headers).unwrap_or_default().to_string();
    let live = move |_: &Message| std::future::ready(sessions.is_live(&id));
    let events = stream.take_while(live).map(|m| {
        let data = serde_json::json!({
            "receivedAt": m.received_at,
            "connector": m.connector,
            "kind": m.kind,
            "threadKey": m.thread_key,
            "deliveryId": m.delivery_id,
            "payload": connector_model::ids::truncate(&m.payload.to_string(), 400),
        });
        Ok::<_, std::convert::Infallible>(
            Event::default()
                .id(m.cursor.to_string())
                .data(data.to_string()),
        )
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

// ----- agents ------------------------------------------------------------------------

async fn agents(s: SignedIn) -> Response {
    let host = s.host();
    html(
        StatusCode::OK,
        pages::agents(s.csrf(), &host.list_agents(), &host.list_units()),
    )
}

async fn put_agent(s: SignedIn, form: FormResult) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let id = f.text("id").unwrap_or("");
    let units: Vec<String> = f
        .get("units")
        .unwrap_or("")
        .split([',', ' ', '\n'])
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect();
    match host.put_agent(id, &units, f.text("displayName")).await {
        Ok((_, written)) => s.done(
            &href(&["agents", id]),
            notice("ok", &format!("Agent `{id}` {}.", written_word(written))),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

fn agent_page(
    host: &Host,
    s: &SignedIn,
    id: &str,
    minted: Option<(&str, &str)>,
    message: Option<Markup>,
) -> Response {
    let all_units = host.list_units();
    let known_units: Vec<&str> = all_units.iter().map(|u| u.id.as_str()).collect();
    match host.agent(id) {
        Ok(a) => html(
            StatusCode::OK,
            pages::agent(
                s.csrf(),
                &a.id,
                a.display_name.as_deref(),
                &a.units,
                &known_units,
                &a.effective_tools,
                minted,
                message,
            ),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn agent(s: SignedIn, Path(id): Path<String>) -> Response {
    let host = s.host();
    agent_page(host, &s, &id, None, None)
}

async fn agent_tools(
    s: SignedIn,
    Path(id): Path<String>,
    query: Result<Query<ToolsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    if let Err(e) = host.agent(&id) {
        return error_response(Some(s.csrf()), &e);
    }
    let q = query.map(|Query(q)| q.q).unwrap_or_default();
    match tools_page(host, s.csrf(), &Subject::Agent(id), &q) {
        Ok(page) => html(StatusCode::OK, page),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn mint_token(s: SignedIn, Path(id): Path<String>, form: FormResult) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let ttl = match f.text("ttlSeconds").map(str::parse::<u64>) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return agent_page(
                host,
                &s,
                &id,
                None,
                Some(notice(
                    "error",
                    "The lifetime must be a whole number of seconds.",
                )),
            )
        }
    };
    match host.issue_agent_token(&id, ttl).await {
        // The token travels in the session's one-time notice: shown on the page the
        // redirect lands on, once; a reload mints nothing and shows it no more.
        Ok(issued) => s.done(
            &href(&["agents", &id]),
            pages::minted_token(&issued.token, &issued.expires_at),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn revoke_tokens(s: SignedIn, Path(id): Path<String>, form: FormResult) -> Response {
    let host = s.host();
    if let Err(r) = fields(&s, form) {
        return *r;
    }
    match host.revoke_agent_tokens(&id).await {
        Ok(()) => s.done(
            &href(&["agents", &id]),
            notice(
                "ok",
                &format!("Every token minted for agent `{id}` so far is revoked."),
            ),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn delete_agent(s: SignedIn, Path(id): Path<String>, form: FormResult) -> Response {
    let host = s.host();
    if let Err(r) = fields(&s, form) {
        return *r;
    }
    match host.delete_agent(&id).await {
        Ok(()) => s.done(
            "/console/agents",
            notice(
                "ok",
                &format!("Agent `{id}` is deleted; its tokens no longer work."),
            ),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

// ----- connectors ----------------------------------------------------------------------

async fn connectors(s: SignedIn) -> Response {
    let host = s.host();
    html(
        StatusCode::OK,
        pages::connectors(s.csrf(), &host.list_connectors(), None),
    )
}

async fn connector(
    s: SignedIn,
    Path(slug): Path<String>,
    query: Result<Query<ToolsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    let q = query.map(|Query(q)| q.q).unwrap_or_default();
    match host.connector(&slug) {
        Ok(c) => {
            let mut bound_on: Vec<String> = host
                .all_bindings()
                .into_iter()
                .filter(|b| b.connector == slug)
                .map(|b| b.unit_id)
                .collect();
            bound_on.sort();
            html(
                StatusCode::OK,
                pages::connector_with(s.csrf(), c.info(), &bound_on, &q),
            )
        }
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn upload(s: SignedIn, multipart: Multipart) -> Response {
    let host = s.host();
    let upload = match read_upload(&s, multipart).await {
        Ok(u) => u,
        Err(UploadError::Csrf(r)) => return *r,
        Err(UploadError::Unreadable(message)) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::error_page(Some(s.csrf()), "Upload refused", &message),
            )
        }
    };
    let Some(bytes) = upload.component.filter(|b| !b.is_empty()) else {
        return html(
            StatusCode::BAD_REQUEST,
            pages::error_page(
                Some(s.csrf()),
                "Upload refused",
                "choose a .wasm component file to upload",
            ),
        );
    };
    let options = connector_core::host::InstallOptions {
        force: upload.force,
        accept_tool_changes: upload.accept,
    };
    let source = connector_core::host::ComponentSource::Upload(bytes.to_vec().into());
    let installed = host
        .install(connector_core::host::InstallRequest { source, options })
        .await;
    installed_page(host, &s, installed, None)
}

/// Installs or rotates from an OCI reference (the form of [`trust::pull_form`]).
async fn pull(s: SignedIn, form: FormResult) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let source = f.get("source").unwrap_or("").trim().to_string();
    let options = connector_core::host::InstallOptions {
        force: f.get("force") == Some("true"),
        accept_tool_changes: f.get("accept") == Some("true"),
    };
    let request = connector_core::host::InstallRequest {
        source: connector_core::host::ComponentSource::Registry(source.clone()),
        options,
    };
    let pulled = host.install(request).await;
    installed_page(host, &s, pulled, Some(&source))
}

/// The page after an install or rotation: what happened, with the tool changes it made,
/// or why it was refused.
fn installed_page(
    host: &Host,
    s: &SignedIn,
    result: connector_model::error::HostResult<connector_core::host::Installed>,
    source: Option<&str>,
) -> Response {
    match result {
        Err(e) if e.code == ErrorCode::ToolDefinitionsChanged => html(
            StatusCode::CONFLICT,
            trust::tool_changes_refused(s.csrf(), &e.message, e.details.as_ref(), source),
        ),
        Ok(installed) if !installed.tool_changes.is_empty() => {
            let text = format!(
                "Rotated `{}` to version {} ({}), from {}, with these tool changes:",
                installed.connector.slug,
                installed.connector.version,
                installed.connector.digest,
                installed.connector.source
            );
            let changes: Vec<serde_json::Value> = installed
                .tool_changes
                .iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect();
            let message = maud::html! { (notice("ok", &text)) (trust::changes_table(&changes)) };
            s.done(&href(&["connectors", &installed.connector.slug]), message)
        }
        other => upload_answer(host, s, other),
    }
}

fn upload_answer(
    host: &Host,
    s: &SignedIn,
    result: connector_model::error::HostResult<connector_core::host::Installed>,
) -> Response {
    match result {
        Ok(installed) => {
            let what = match installed.written {
                connector_core::host::Written::Created => "Installed",
                connector_core::host::Written::Updated => "Rotated",
            };
            let text = format!(
                "{what} `{}` version {} ({}), from {}.",
                installed.connector.slug,
                installed.connector.version,
                installed.connector.digest,
                installed.connector.source
            );
            s.done(
                &href(&["connectors", &installed.connector.slug]),
                notice("ok", &text),
            )
        }
        Err(e) if e.code == ErrorCode::RotationBreaksBindings => html(
            StatusCode::CONFLICT,
            pages::rotation_refused(s.csrf(), &e.message, e.details.as_ref()),
        ),
        Err(e) => html(
            connector_http::status_of(e.code),
            pages::connectors(
                s.csrf(),
                &host.list_connectors(),
                Some(notice("error", &format!("Upload refused: {}", e.message))),
            ),
        ),
    }
}

struct Upload {
    force: bool,
    accept: bool,
    component: Option<bytes::Bytes>,
}

enum UploadError {
    /// The form's CSRF token is missing or wrong (the answer to send).
    Csrf(Box<Response>),
    /// The body is not a readable form (why).
    Unreadable(String),
}

/// Reads the upload form. The component's bytes are read only after the session's CSRF
/// token, which the form sends first, has been checked.
async fn read_upload(s: &SignedIn, mut multipart: Multipart) -> Result<Upload, UploadError> {
    let mut upload = Upload {
        force: false,
        accept: false,
        component: None,
    };
    let mut token_checked = false;
    let unreadable = |e: axum::extract::multipart::MultipartError| {
        UploadError::Unreadable(format!(
            "the upload could not be read ({}); components are limited to {} MiB",
            e.body_text(),
            MAX_UPLOAD_BYTES / (1024 * 1024)
        ))
    };
    let refused = |why: &str| {
        UploadError::Csrf(Box::new(html(
            StatusCode::FORBIDDEN,
            pages::error_page(Some(s.csrf()), "Request refused", why),
        )))
    };
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        match field.name() {
            Some("csrf") => {
                let token = field.text().await.map_err(unreadable)?;
                s.check(Some(&token)).map_err(UploadError::Csrf)?;
                token_checked = true;
            }
            Some("force") => upload.force = field.text().await.map_err(unreadable)? == "true",
            Some("accept") => upload.accept = field.text().await.map_err(unreadable)? == "true",
            Some("component") => {
                if !token_checked {
                    return Err(refused(
                        "the form's CSRF token must come before the component; reload the page and upload again",
                    ));
                }
                upload.component = Some(field.bytes().await.map_err(unreadable)?);
            }
            _ => {}
        }
    }
    if !token_checked {
        return Err(refused(
            "the form's CSRF token is missing; reload the page and upload again",
        ));
    }
    Ok(upload)
}

#[derive(Deserialize)]
struct DeliveriesQuery {
    #[serde(default)]
    status: String,
}

async fn deliveries(
    s: SignedIn,
    Path(slug): Path<String>,
    query: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let host = s.host();
    if let Err(e) = host.connector(&slug) {
        return error_response(Some(s.csrf()), &e);
    }
    let status = query.map(|Query(q)| q.status).unwrap_or_default();
    let status = match status.as_str() {
        "" => "",
        st => match pages::DELIVERY_STATUSES.iter().find(|known| **known == st) {
            Some(known) => *known,
            None => {
                return html(
                    StatusCode::BAD_REQUEST,
                    pages::error_page(
                        Some(s.csrf()),
                        "Invalid request",
                        "`status` is one of pending, failed or done (or empty for all)",
                    ),
                )
            }
        },
    };
    // A status is read by status in the store, however many others are newer.
    let listed = match [
        DeliveryStatus::Pending,
        DeliveryStatus::Failed,
        DeliveryStatus::Done,
    ]
    .into_iter()
    .find(|s| s.as_str() == status)
    {
        Some(wanted) => {
            host.deliveries_with_status(&slug, wanted, None, DELIVERIES_SHOWN)
                .await
        }
        None => host.deliveries(&slug, DELIVERIES_SHOWN).await,
    };
    match listed {
        Ok(list) => html(
            StatusCode::OK,
            pages::deliveries_with(s.csrf(), &slug, &list, None, status),
        ),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

async fn retry_delivery(
    s: SignedIn,
    Path((slug, delivery)): Path<(String, String)>,
    form: FormResult,
) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let message = match host.retry_delivery(&slug, &delivery).await {
        Ok(outcome) => notice(
            "ok",
            &format!(
                "Delivery {delivery}: {}; routed to {}.",
                outcome.status.as_str(),
                if outcome.routed_to.is_empty() {
                    "no unit".to_string()
                } else {
                    outcome.routed_to.join(", ")
                }
            ),
        ),
        Err(e) => notice(
            "error",
            &format!("Delivery {delivery} failed again: {}", e.message),
        ),
    };
    // Back to where the button was: the list (with its filter) or the delivery's page.
    let back = match f.text("back") {
        Some(back) if back.starts_with("/console/connectors/") => back.to_string(),
        _ => href(&["connectors", &slug, "deliveries"]),
    };
    s.done(&back, message)
}
