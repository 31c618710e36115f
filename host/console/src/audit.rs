//! `/console/audit`: the audit log, filtered by actor, action, target and time, newest
//! records last as the API pages them. A plain `GET` form (works without scripts); unit,
//! agent and connector pages link here with their target filled in.

use std::collections::BTreeMap;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};

use super::pages::{page, Section};
use super::{error_response, html, SignedIn};
use connector_core::audit::parse_audit_time;
use connector_core::host::{AuditPage, AuditQuery};
use connector_model::audit::ActorKind;
use connector_model::error::HostError;

/// Records per page.
const PAGE: u32 = 100;

/// The filters the form sends, by their query names.
const FILTERS: [(&str, &str); 6] = [
    ("actorKind", "Actor kind"),
    ("actorId", "Actor id"),
    ("action", "Action"),
    ("target", "Target"),
    ("since", "Since (RFC 3339)"),
    ("until", "Until (RFC 3339)"),
];

/// `/console/audit?target=unit:<id>`: where a page's "History" link goes.
pub fn history_href(target: &str) -> String {
    let mut out = String::from("/console/audit?target=");
    for b in target.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query_of(filters: &BTreeMap<String, String>) -> Result<AuditQuery, HostError> {
    let given = |name: &str| filters.get(name).filter(|v| !v.trim().is_empty()).cloned();
    if let Some(kind) = given("actorKind") {
        if ActorKind::parse(&kind).is_none() {
            return Err(HostError::invalid_request(format!(
                "the actor kind must be operator, console, agent, webhook or host, not `{kind}`"
            )));
        }
    }
    let after = match given("after") {
        Some(a) => a.parse::<i64>().map_err(|_| {
            HostError::invalid_request(format!("`after` must be a record's seq, not `{a}`"))
        })?,
        None => 0,
    };
    let time = |name: &str| {
        given(name)
            .map(|t| parse_audit_time(name, t.trim()))
            .transpose()
    };
    Ok(AuditQuery {
        after,
        limit: PAGE,
        action: given("action"),
        actor_kind: given("actorKind"),
        actor_id: given("actorId"),
        target: given("target"),
        since: time("since")?,
        until: time("until")?,
    })
}

/// `GET /console/audit`.
pub(super) async fn audit(
    s: SignedIn,
    Query(filters): Query<BTreeMap<String, String>>,
) -> Response {
    let host = s.host();
    let query = match query_of(&filters) {
        Ok(q) => q,
        Err(e) => return error_response(Some(s.csrf()), &e),
    };
    match host.audit_records(query).await {
        Ok(found) => html(StatusCode::OK, view(s.csrf(), &filters, &found)),
        Err(e) => error_response(Some(s.csrf()), &e),
    }
}

fn view(csrf: &str, filters: &BTreeMap<String, String>, found: &AuditPage) -> Markup {
    let value = |name: &str| filters.get(name).map(String::as_str).unwrap_or("");
    let next = found.next.map(|after| {
        let mut link = format!("/console/audit?after={after}");
        for (name, _) in FILTERS {
            let v = value(name);
            if !v.is_empty() {
                link.push_str(&format!("&{name}={}", url_encode(v)));
            }
        }
        link
    });
    page(
        "Audit log",
        Some(csrf),
        Section::Audit,
        html! {
            h1 { "Audit log" }
            form.filters method="get" action="/console/audit" {
                @for (name, label) in FILTERS {
                    label {
                        (label) " "
                        @if name == "actorKind" {
                            select name=(name) {
                                option value="" { "any" }
                                @for kind in ActorKind::ALL {
                                    option value=(kind.as_str()) selected[value(name) == kind.as_str()] { (kind.as_str()) }
                                }
                            }
                        } @else {
                            input type="text" name=(name) value=(value(name));
                        }
                    }
                }
                button type="submit" { "Filter" }
                " " a href="/console/audit" { "Clear" }
            }
            @if found.records.is_empty() {
                p { "No records match." }
            } @else {
                div.scroll {
                    table.audit {
                        thead { tr {
                            th scope="col" { "Seq" } th scope="col" { "At" } th scope="col" { "Actor" }
                            th scope="col" { "Action" } th scope="col" { "Target" } th scope="col" { "Outcome" }
                        } }
                        tbody {
                            @for r in &found.records {
                                tr data-seq=(r.seq) {
                                    td { (r.seq) }
                                    td { (r.at) }
                                    td {
                                        (r.actor.kind.as_str())
                                        @if let Some(id) = &r.actor.id { " " code { (id) } }
                                    }
                                    td { code { (r.action) } }
                                    td { a href=(history_href(&r.target)) { code { (r.target) } } }
                                    td { span.status.(if r.outcome == "ok" { "done" } else { "failed" }) { (r.outcome) } }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p { a href=(next) { "Later records" } }
            }
        },
    )
}

fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_links_keep_the_target_readable_and_encode_the_rest() {
        assert_eq!(history_href("unit:eng"), "/console/audit?target=unit:eng");
        assert_eq!(
            history_href("binding:eng/acme"),
            "/console/audit?target=binding:eng%2Facme"
        );
    }

    #[test]
    fn filters_are_checked_before_the_host_is_asked() {
        let filters = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let q = query_of(&filters(&[
            ("actorKind", "agent"),
            ("target", ""),
            ("since", "2026-01-01T00:00:00Z"),
        ]))
        .expect("valid filters");
        assert_eq!(q.actor_kind.as_deref(), Some("agent"));
        assert_eq!(q.target, None);
        assert_eq!(q.since.as_deref(), Some("2026-01-01T00:00:00.000Z"));
        assert!(query_of(&filters(&[("actorKind", "robot")])).is_err());
        assert!(query_of(&filters(&[("until", "soon")])).is_err());
    }
}
