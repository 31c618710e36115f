//! The console's confirmations, notices and the actions added beside the first views:
//! explicit grants, an agent's image tools, removing a connector, one delivery's details.
//!
//! Two rules every change in the console follows (CONTRACT §7):
//! - **A destructive action asks first.** Its button is a link to a confirmation page
//!   (`GET`) that says what will happen; the change itself is that page's form (`POST`,
//!   with the session's CSRF token). Nothing but the form changes anything, so the
//!   question works without scripts and cannot be skipped by a stray click.
//! - **Every change ends on a page that says what happened** (post/redirect/get): the
//!   handler leaves a notice in the operator's session and redirects; [`show_notice`]
//!   puts that notice at the top of the next page the session loads, once. A reload
//!   then repeats nothing and the browser is never left on a `POST` URL. The notice
//!   lives in the server-side session, never in the URL, so nobody can make the
//!   console show a message of their own through a link.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Request};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use super::pages::{self, csrf_field, danger_link, href, notice, Section};
use super::session::{self, Sessions};
use super::{error_response, fields, html, FormResult, SignedIn};
use connector_core::host::{GrantView, Host};
use connector_model::error::ErrorCode;
use connector_model::records::Subject;

// ----- notices -----------------------------------------------------------------------

/// Where a page's notice goes: the start of its main content.
const MAIN_OPEN: &str = "<main id=\"main\">";

/// Middleware: a `GET` answered with an HTML page gets the notice its session was left
/// by the change before (see [`SignedIn::done`]), once.
pub(crate) async fn show_notice(request: Request, next: Next) -> Response {
    let target = match (
        request.method() == Method::GET,
        request.extensions().get::<Arc<Sessions>>(),
        session::cookie_id(request.headers()),
    ) {
        (true, Some(sessions), Some(id)) => Some((sessions.clone(), id.to_string())),
        _ => None,
    };
    let response = next.run(request).await;
    let Some((sessions, id)) = target else {
        return response;
    };
    let is_page = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/html"));
    if response.status() != StatusCode::OK || !is_page {
        return response;
    }
    let Some(notice) = sessions.take_notice(&id) else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    // Pages are rendered in memory by this process; reading one back is bounded by that.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                pages::error_page(None, "The page could not be shown", &e.to_string()),
            )
        }
    };
    let page = String::from_utf8_lossy(&bytes);
    let page = match page.find(MAIN_OPEN) {
        Some(at) => {
            let at = at + MAIN_OPEN.len();
            format!("{}{notice}{}", &page[..at], &page[at..])
        }
        None => page.into_owned(),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(page))
}

// ----- confirmations -----------------------------------------------------------------

/// A confirmation page: what will happen, and the form that does it.
struct Confirm<'a> {
    title: String,
    section: Section,
    /// What the action does, in words.
    what: Markup,
    /// Where the form posts (the action itself).
    action: String,
    /// The button's label.
    button: &'a str,
    /// Where "Cancel" leads.
    cancel: String,
    /// Fields the action takes besides the CSRF token.
    extra: Markup,
}

fn confirm_page(s: &SignedIn, c: Confirm<'_>) -> Response {
    let csrf = s.csrf();
    html(
        StatusCode::OK,
        pages::page(
            &c.title,
            Some(csrf),
            c.section,
            html! {
                h1 { (c.title) }
                div.confirm { (c.what) }
                form.stack.confirm method="post" action=(c.action) {
                    (csrf_field(csrf))
                    (c.extra)
                    div.actions {
                        button.danger type="submit" { (c.button) }
                        a.button.secondary href=(c.cancel) { "Cancel" }
                    }
                }
            },
        ),
    )
}

/// A page saying the action cannot be done as things are, with the way back.
fn cannot_page(s: &SignedIn, title: &str, section: Section, why: &str, back: &str) -> Response {
    html(
        StatusCode::CONFLICT,
        pages::page(
            title,
            Some(s.csrf()),
            section,
            html! {
                h1 { (title) }
                (notice("error", why))
                p { a href=(back) { "Back" } }
            },
        ),
    )
}

fn list_words(items: &[String]) -> Markup {
    html! {
        @for (i, item) in items.iter().enumerate() {
            @if i > 0 { ", " }
            code { (item) }
        }
    }
}

pub(crate) async fn confirm_delete_unit(s: SignedIn, Path(id): Path<String>) -> Response {
    let host = s.host();
    let view = match host.unit(&id) {
        Ok(v) => v,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let children: Vec<String> = host
        .list_units()
        .into_iter()
        .filter(|u| u.parent.as_deref() == Some(id.as_str()))
        .map(|u| u.id)
        .collect();
    if !children.is_empty() {
        return cannot_page(
            &s,
            &format!("Unit {id} cannot be deleted"),
            Section::Units,
            &format!(
                "unit `{id}` has children ({}): delete or move them first",
                children.join(", ")
            ),
            &href(&["units", &id]),
        );
    }
    let bound: Vec<String> = view.bindings.iter().map(|b| b.connector.clone()).collect();
    let agents: Vec<String> = host
        .list_agents()
        .into_iter()
        .filter(|a| a.units.contains(&id))
        .map(|a| a.id)
        .collect();
    confirm_page(
        &s,
        Confirm {
            title: format!("Delete unit {id}?"),
            section: Section::Units,
            what: html! {
                p { "Unit " code { (id) } " is deleted. " }
                @if bound.is_empty() {
                    p { "No connector is bound to it." }
                } @else {
                    p { "Its bindings (" (list_words(&bound)) ") are unbound and their grants revoked." }
                }
                @if !agents.is_empty() {
                    p { "Agents in it (" (list_words(&agents)) ") lose what they had through it." }
                }
            },
            action: href(&["units", &id, "delete"]),
            button: "Delete the unit",
            cancel: href(&["units", &id]),
            extra: html! {},
        },
    )
}

pub(crate) async fn confirm_unbind(
    s: SignedIn,
    Path((unit, slug)): Path<(String, String)>,
) -> Response {
    let host = s.host();
    let bindings = match host.bindings(&unit) {
        Ok(b) => b,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let Some(binding) = bindings.iter().find(|b| b.connector == slug) else {
        return cannot_page(
            &s,
            "Nothing to unbind",
            Section::Units,
            &format!("connector `{slug}` is not bound to unit `{unit}`"),
            &href(&["units", &unit]),
        );
    };
    let grants: Vec<String> = binding.grants.iter().map(|g| g.tool.clone()).collect();
    confirm_page(
        &s,
        Confirm {
            title: format!("Unbind {slug} from {unit}?"),
            section: Section::Units,
            what: html! {
                p { "The binding of " code { (slug) } " on unit " code { (unit) } " and its configuration are removed." }
                p { "Its grants (" (list_words(&grants)) ") are revoked: the unit, its descendants and their agents lose those tools, unless another binding grants them." }
            },
            action: href(&["units", &unit, "unbind", &slug]),
            button: "Unbind",
            cancel: href(&["units", &unit]),
            extra: html! {},
        },
    )
}

pub(crate) async fn confirm_revoke_tokens(s: SignedIn, Path(id): Path<String>) -> Response {
    let host = s.host();
    if let Err(e) = host.agent(&id) {
        return error_response(Some(s.csrf()), &e);
    }
    confirm_page(
        &s,
        Confirm {
            title: format!("Revoke every token of {id}?"),
            section: Section::Agents,
            what: html! {
                p { "Every token minted for agent " code { (id) } " so far stops working at once, on every replica. "
                    "Whatever uses one (the agent's container, a script) is refused from then on until it gets a new token." }
            },
            action: href(&["agents", &id, "tokens", "revoke"]),
            button: "Revoke all tokens",
            cancel: href(&["agents", &id]),
            extra: html! {},
        },
    )
}

pub(crate) async fn confirm_delete_agent(s: SignedIn, Path(id): Path<String>) -> Response {
    let host = s.host();
    if let Err(e) = host.agent(&id) {
        return error_response(Some(s.csrf()), &e);
    }
    let grants: Vec<String> = host
        .explicit_grants(&Subject::Agent(id.clone()))
        .into_iter()
        .map(|g| g.tool)
        .collect();
    confirm_page(
        &s,
        Confirm {
            title: format!("Delete agent {id}?"),
            section: Section::Agents,
            what: html! {
                p { "Agent " code { (id) } " is deleted and every token minted for it stops working. "
                    "An agent created again with the same id does not get the old tokens back." }
                @if !grants.is_empty() {
                    p { "Its explicit grants (" (list_words(&grants)) ") are deleted with it." }
                }
            },
            action: href(&["agents", &id, "delete"]),
            button: "Delete the agent",
            cancel: href(&["agents", &id]),
            extra: html! {},
        },
    )
}

// ----- explicit grants ---------------------------------------------------------------

/// The path segments of a subject's pages.
fn base_of(subject: &Subject) -> [&str; 2] {
    match subject {
        Subject::Unit(id) => ["units", id.as_str()],
        Subject::Agent(id) => ["agents", id.as_str()],
    }
}

fn words_of(subject: &Subject) -> String {
    match subject {
        Subject::Unit(id) => format!("unit `{id}`"),
        Subject::Agent(id) => format!("agent `{id}`"),
    }
}

/// The explicit grants of a Tools page, with the forms to add and revoke them.
pub fn grants_section(
    csrf: &str,
    subject_base: [&str; 2],
    grants: &[GrantView],
    grantable: &[String],
) -> Markup {
    let [kind, id] = subject_base;
    let whose = if kind == "units" {
        "this unit"
    } else {
        "this agent"
    };
    html! {
        section aria-labelledby="tools-grants" {
            h2 #tools-grants { "Explicit grants " span.count { "(" (grants.len()) ")" } }
            p.hint { "Granted to " (whose) " only (not inherited), beside what bindings grant. A namespace grants all its tools, also tools a later version adds." }
            @if grants.is_empty() {
                p { "No explicit grants." }
            } @else {
                div.scroll {
                    table.grants {
                        thead { tr { th scope="col" { "Grant" } th scope="col" { "Namespace" } th scope="col" { "Granted at" } th scope="col" { "Actions" } } }
                        tbody {
                            @for g in grants {
                                tr data-grant=(g.tool) {
                                    td { code { (g.tool) } }
                                    td { code { (g.namespace) } }
                                    td { (g.created_at) }
                                    td.actions { (danger_link(&href(&[kind, id, "grants", &g.tool, "revoke"]), "Revoke…")) }
                                }
                            }
                        }
                    }
                }
            }
            form.row.grant method="post" action=(href(&[kind, id, "grants"])) {
                (csrf_field(csrf))
                label for="grant-target" { "Grant a tool id or a namespace" }
                input #grant-target name="target" required list="grantable" placeholder="arxiv or arxiv.search" autocomplete="off";
                datalist #grantable { @for t in grantable { option value=(t) {} } }
                button type="submit" { "Grant" }
            }
        }
    }
}

/// What an operator may grant: every installed connector's namespace and tool ids.
pub fn grantable(host: &Host) -> Vec<String> {
    let mut out = Vec::new();
    for c in host.list_connectors() {
        out.push(c.tool_namespace.clone());
        out.extend(c.tools.iter().map(|t| t.name.clone()));
    }
    out
}

async fn grant(host: &Host, s: &SignedIn, subject: Subject, form: FormResult) -> Response {
    let f = match fields(s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let target = f.text("target").unwrap_or("").to_string();
    let base = base_of(&subject);
    let back = href(&[base[0], base[1], "tools"]);
    let who = words_of(&subject);
    match host.grant(subject, &target).await {
        Ok(g) => s.done(
            &back,
            notice("ok", &format!("Granted `{}` to {who} explicitly.", g.tool)),
        ),
        Err(e) if e.code == ErrorCode::NotFound => error_response(Some(s.csrf()), &e),
        Err(e) => s.done(
            &back,
            notice("error", &format!("Nothing was granted: {}", e.message)),
        ),
    }
}

pub(crate) async fn grant_to_unit(
    s: SignedIn,
    Path(id): Path<String>,
    form: FormResult,
) -> Response {
    let host = s.host();
    grant(host, &s, Subject::Unit(id), form).await
}

pub(crate) async fn grant_to_agent(
    s: SignedIn,
    Path(id): Path<String>,
    form: FormResult,
) -> Response {
    let host = s.host();
    grant(host, &s, Subject::Agent(id), form).await
}

fn confirm_revoke_grant(host: &Host, s: &SignedIn, subject: Subject, target: &str) -> Response {
    let base = base_of(&subject);
    let section = if base[0] == "units" {
        Section::Units
    } else {
        Section::Agents
    };
    let exists = match &subject {
        Subject::Unit(id) => host.unit(id).map(|_| ()),
        Subject::Agent(id) => host.agent(id).map(|_| ()),
    };
    if let Err(e) = exists {
        return error_response(Some(s.csrf()), &e);
    }
    let who = words_of(&subject);
    let grants = host.explicit_grants(&subject);
    let Some(g) = grants.iter().find(|g| g.tool == target) else {
        return cannot_page(
            s,
            "Nothing to revoke",
            section,
            &format!("{who} has no explicit grant of `{target}`"),
            &href(&[base[0], base[1], "tools"]),
        );
    };
    confirm_page(
        s,
        Confirm {
            title: format!("Revoke {} from {}?", g.tool, base[1]),
            section,
            what: html! {
                p { "The explicit grant of " code { (g.tool) } " to " (who) " is revoked. "
                    "Its tools stay only where a binding (or another grant) brings them." }
            },
            action: href(&[base[0], base[1], "grants", &g.tool, "revoke"]),
            button: "Revoke the grant",
            cancel: href(&[base[0], base[1], "tools"]),
            extra: html! {},
        },
    )
}

pub(crate) async fn confirm_revoke_unit_grant(
    s: SignedIn,
    Path((id, target)): Path<(String, String)>,
) -> Response {
    let host = s.host();
    confirm_revoke_grant(host, &s, Subject::Unit(id), &target)
}

pub(crate) async fn confirm_revoke_agent_grant(
    s: SignedIn,
    Path((id, target)): Path<(String, String)>,
) -> Response {
    let host = s.host();
    confirm_revoke_grant(host, &s, Subject::Agent(id), &target)
}

async fn revoke_grant(
    host: &Host,
    s: &SignedIn,
    subject: Subject,
    target: &str,
    form: FormResult,
) -> Response {
    if let Err(r) = fields(s, form) {
        return *r;
    }
    let base = base_of(&subject);
    let back = href(&[base[0], base[1], "tools"]);
    let who = words_of(&subject);
    match host.revoke(subject, target).await {
        Ok(()) => s.done(
            &back,
            notice(
                "ok",
                &format!("Revoked the explicit grant of `{target}` from {who}."),
            ),
        ),
        Err(e) => s.done(
            &back,
            notice("error", &format!("Nothing was revoked: {}", e.message)),
        ),
    }
}

pub(crate) async fn revoke_unit_grant(
    s: SignedIn,
    Path((id, target)): Path<(String, String)>,
    form: FormResult,
) -> Response {
    let host = s.host();
    revoke_grant(host, &s, Subject::Unit(id), &target, form).await
}

pub(crate) async fn revoke_agent_grant(
    s: SignedIn,
    Path((id, target)): Path<(String, String)>,
    form: FormResult,
) -> Response {
    let host = s.host();
    revoke_grant(host, &s, Subject::Agent(id), &target, form).await
}

// ----- image tools ------------------------------------------------------------------

/// The forms that set the tools an agent's container image declares: read them from the
/// running image (`GET {url}/a2a/tools`), or give them as JSON.
pub fn image_tools_forms(csrf: &str, agent: &str) -> Markup {
    html! {
        section aria-labelledby="image-tools-set" {
            h2 #image-tools-set { "Set the image's tools" }
            p.hint { "The Image section above lists what the agent's container image declares. "
                "Read it from the running image, or paste it. Either replaces what is stored." }
            form.row.introspect method="post" action=(href(&["agents", agent, "image-tools", "introspect"])) {
                (csrf_field(csrf))
                label for="image-url" { "Image URL" }
                input #image-url type="url" name="url" required placeholder="http://10.0.0.5:8080";
                button type="submit" { "Read GET …/a2a/tools" }
            }
            form.stack.image-json method="post" action=(href(&["agents", agent, "image-tools"])) {
                (csrf_field(csrf))
                label for="image-digest" { "Image digest" }
                input #image-digest name="digest" required placeholder="sha256:…";
                label for="image-tools" { "Tools (JSON array of {name, description, inputSchema})" }
                textarea #image-tools name="tools" rows="5" required {}
                button type="submit" { "Store these tools" }
            }
        }
    }
}

fn tool_count(v: &Value) -> usize {
    v.get("tools").and_then(Value::as_array).map_or(0, Vec::len)
}

pub(crate) async fn introspect_image_tools(
    s: SignedIn,
    Path(agent): Path<String>,
    form: FormResult,
) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let url = f.text("url").unwrap_or("").to_string();
    let back = href(&["agents", &agent, "tools"]);
    match host.introspect_image_tools(&agent, &url).await {
        Ok(v) => s.done(
            &back,
            notice(
                "ok",
                &format!(
                    "Read {} tools from {url} (image {}).",
                    tool_count(&v),
                    v.get("digest").and_then(Value::as_str).unwrap_or("?")
                ),
            ),
        ),
        Err(e) if e.code == ErrorCode::NotFound => error_response(Some(s.csrf()), &e),
        Err(e) => s.done(
            &back,
            notice(
                "error",
                &format!("The image's tools were not read: {}", e.message),
            ),
        ),
    }
}

pub(crate) async fn put_image_tools(
    s: SignedIn,
    Path(agent): Path<String>,
    form: FormResult,
) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let back = href(&["agents", &agent, "tools"]);
    let digest = f.text("digest").unwrap_or("").to_string();
    let tools = match serde_json::from_str::<Value>(f.get("tools").unwrap_or("")) {
        Ok(t) => t,
        Err(e) => {
            return s.done(
                &back,
                notice("error", &format!("The tools are not JSON: {e}")),
            )
        }
    };
    match host.put_image_tools(&agent, &digest, tools).await {
        Ok(v) => s.done(
            &back,
            notice(
                "ok",
                &format!("Stored {} image tools (image {digest}).", tool_count(&v)),
            ),
        ),
        Err(e) if e.code == ErrorCode::NotFound => error_response(Some(s.csrf()), &e),
        Err(e) => s.done(
            &back,
            notice(
                "error",
                &format!("The image's tools were not stored: {}", e.message),
            ),
        ),
    }
}

// ----- removing a connector ----------------------------------------------------------

fn bound_units(host: &Host, slug: &str) -> Vec<String> {
    let mut units: Vec<String> = host
        .all_bindings()
        .into_iter()
        .filter(|b| b.connector == slug)
        .map(|b| b.unit_id)
        .collect();
    units.sort();
    units
}

pub(crate) async fn confirm_remove_connector(s: SignedIn, Path(slug): Path<String>) -> Response {
    let host = s.host();
    let c = match host.connector(&slug) {
        Ok(c) => c,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let info = c.info();
    let bound = bound_units(host, &slug);
    confirm_page(
        &s,
        Confirm {
            title: format!("Remove connector {slug}?"),
            section: Section::Connectors,
            what: html! {
                p { "Connector " code { (slug) } " (" (info.display_name) ", version " (info.version) ") is uninstalled: "
                    "its " (info.tools.len()) " tools leave every unit and agent, and its webhooks are no longer taken." }
                @if bound.is_empty() {
                    p { "It is bound to no unit." }
                } @else {
                    (notice("error", &format!(
                        "It is bound to {} unit(s). A bound connector is removed only when you also tick the box below: \
                         it is then unbound from each unit first, revoking those bindings' grants.",
                        bound.len()
                    )))
                    p { "Bound on: " (list_words(&bound)) }
                }
            },
            action: href(&["connectors", &slug, "remove"]),
            button: "Remove the connector",
            cancel: href(&["connectors", &slug]),
            extra: html! {
                @if !bound.is_empty() {
                    label.check {
                        input #remove-force type="checkbox" name="force" value="true";
                        " Unbind it from these units first"
                    }
                }
            },
        },
    )
}

pub(crate) async fn remove_connector(
    s: SignedIn,
    Path(slug): Path<String>,
    form: FormResult,
) -> Response {
    let host = s.host();
    let f = match fields(&s, form) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let force = f.get("force") == Some("true");
    let bound = bound_units(host, &slug);
    match host.remove_connector(&slug, force).await {
        Ok(()) => {
            let unbound = if force && !bound.is_empty() {
                format!(
                    " It was unbound from {} first, revoking those grants.",
                    bound.join(", ")
                )
            } else {
                String::new()
            };
            s.done(
                "/console/connectors",
                notice("ok", &format!("Removed connector `{slug}`.{unbound}")),
            )
        }
        Err(e) if e.code == ErrorCode::NotFound => error_response(Some(s.csrf()), &e),
        Err(e) => s.done(
            &href(&["connectors", &slug, "remove"]),
            notice(
                "error",
                &format!("Connector `{slug}` was not removed: {}", e.message),
            ),
        ),
    }
}

// ----- one delivery ------------------------------------------------------------------

/// The most of a payload the details page shows.
const PAYLOAD_SHOWN: usize = 256 * 1024;

pub(crate) async fn delivery(s: SignedIn, Path((slug, id)): Path<(String, String)>) -> Response {
    let host = s.host();
    let d = match host.delivery_record(&slug, &id).await {
        Ok(d) => d,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    let csrf = s.csrf();
    let body_len = d.body.len();
    let shown = &d.body[..body_len.min(PAYLOAD_SHOWN)];
    let payload = match serde_json::from_slice::<Value>(shown) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(shown).into_owned(),
    };
    let here = href(&["connectors", &slug, "deliveries", &id]);
    html(
        StatusCode::OK,
        pages::page(
            &format!("Delivery {id}"),
            Some(csrf),
            Section::Connectors,
            html! {
                h1 { "Delivery " code { (id) } }
                p { a href=(href(&["connectors", &slug, "deliveries"])) { "All deliveries of " (slug) } }
                dl.facts {
                    dt { "Connector" } dd { a href=(href(&["connectors", &slug])) { (slug) } }
                    dt { "Event" } dd { (d.event.as_deref().unwrap_or("—")) }
                    dt { "Received" } dd { (d.received_at) }
                    dt { "Status" } dd { span.status.(d.status.as_str()) { (d.status.as_str()) } }
                    dt { "Attempts" } dd { (d.attempts) }
                    dt { "Last error" } dd.error { (d.error.as_deref().unwrap_or("—")) }
                    dt { "Routed to" } dd {
                        @if d.routed_to.is_empty() { "—" }
                        @for (i, u) in d.routed_to.iter().enumerate() { @if i > 0 { ", " } a href=(href(&["units", u])) { (u) } }
                    }
                }
                @if d.status.as_str() != "done" {
                    form.inline method="post" action=(href(&["connectors", &slug, "deliveries", &id, "retry"])) {
                        (csrf_field(csrf))
                        input type="hidden" name="back" value=(here);
                        button type="submit" { "Retry" }
                    }
                }
                h2 { "Headers" }
                p.hint { "The request headers the host keeps (and hands to the connector); credentials and proxy headers are never stored." }
                div.scroll {
                    table.headers {
                        thead { tr { th scope="col" { "Name" } th scope="col" { "Value" } } }
                        tbody {
                            @for (name, value) in &d.headers {
                                tr { td { code { (name) } } td { code { (value) } } }
                            }
                        }
                    }
                }
                h2 { "Payload" }
                @if body_len == 0 {
                    p { "No body is stored (empty, or pruned after the de-duplication window)." }
                } @else {
                    p.hint { (body_len) " bytes"
                        @if body_len > PAYLOAD_SHOWN { "; the first " (PAYLOAD_SHOWN) " are shown" } "." }
                    pre.json #payload { (payload) }
                }
            },
        ),
    )
}
