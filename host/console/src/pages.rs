//! The console's HTML: one function per view, built with `maud` (compile-time templates
//! that escape every interpolated string). Nothing here reads state; handlers pass in what
//! a page shows, as the host's own views (`UnitView`, `ResolvedTools`, ...) return it.

use std::collections::BTreeMap;

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

use super::form::{self, Field, FieldError, FieldKind};
use connector_core::grants::{EffectiveTool, Provider, ResolvedTools};
use connector_core::host::{AgentSummary, BindingView, GrantView, Message};
use connector_model::connector::{Connector, ToolAnnotations};
use connector_model::provenance::Provenance;
use connector_model::records::{DeliveryRecord, UnitRecord};

/// The top-level section a page belongs to (highlighted in the navigation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Units,
    Agents,
    Connectors,
    Audit,
    None,
}

/// `/console/...` with each path segment percent-encoded.
pub fn href(segments: &[&str]) -> String {
    let mut out = String::from("/console");
    for s in segments {
        out.push('/');
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// A whole page: navigation, the sign-out form (when signed in) and `body`.
pub fn page(title: &str, csrf: Option<&str>, section: Section, body: Markup) -> Markup {
    let nav = [
        (Section::Units, "Units", "/console/units"),
        (Section::Agents, "Agents", "/console/agents"),
        (Section::Connectors, "Connectors", "/console/connectors"),
        (Section::Audit, "Audit log", "/console/audit"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (title) " · connector-host console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/console" { "connector-host" }
                    @if let Some(csrf) = csrf {
                        nav aria-label="Main" {
                            ul {
                                @for (s, label, link) in nav {
                                    li {
                                        @if s == section {
                                            a href=(link) aria-current="page" { (label) }
                                        } @else {
                                            a href=(link) { (label) }
                                        }
                                    }
                                }
                            }
                        }
                        form.signout method="post" action="/console/sign-out" {
                            input type="hidden" name="csrf" value=(csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// The hidden CSRF field every state-changing form carries.
pub(super) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A link to the confirmation page of a destructive action (the action itself is the
/// form on that page).
pub(crate) fn danger_link(action: &str, label: &str) -> Markup {
    html! { a.button.danger href=(action) { (label) } }
}

/// The notice of a freshly minted agent token: the only time the token is shown.
pub fn minted_token(token: &str, expires_at: &str) -> Markup {
    html! {
        div.notice.ok role="status" {
            p { "A new agent token, valid until " (expires_at) ". It is shown this once: copy it now." }
            p { code #minted-token .secret { (token) } }
        }
    }
}

/// A message for the operator above a page's content.
pub fn notice(kind: &str, text: &str) -> Markup {
    html! { p.notice.(kind) role=(if kind == "error" { "alert" } else { "status" }) { (text) } }
}

pub fn sign_in(error: Option<&str>) -> Markup {
    page(
        "Sign in",
        None,
        Section::None,
        html! {
            h1 { "Sign in" }
            @if let Some(e) = error { (notice("error", e)) }
            form.stack method="post" action="/console/sign-in" {
                label for="token" { "Operator token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                p.hint { "The token is in " code { "<data dir>/operator-token" } " or "
                    code { "CONNECTOR_HOST_OPERATOR_TOKEN" } "." }
                button type="submit" { "Sign in" }
            }
        },
    )
}

pub fn error_page(csrf: Option<&str>, title: &str, message: &str) -> Markup {
    page(
        title,
        csrf,
        Section::None,
        html! {
            h1 { (title) }
            (notice("error", message))
            p { a href="/console/units" { "Back to the units" } }
        },
    )
}

// ----- units -------------------------------------------------------------------------

/// Units in tree order: (depth, unit), each parent before its children, siblings by id.
pub fn tree_order(units: &[UnitRecord]) -> Vec<(usize, &UnitRecord)> {
    let ids: std::collections::HashSet<&str> = units.iter().map(|u| u.id.as_str()).collect();
    let mut children: BTreeMap<Option<&str>, Vec<&UnitRecord>> = BTreeMap::new();
    for u in units {
        let parent = u.parent.as_deref().filter(|p| ids.contains(p));
        children.entry(parent).or_default().push(u);
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.id.cmp(&b.id));
    }
    let mut out = Vec::with_capacity(units.len());
    let mut stack: Vec<(usize, &UnitRecord)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|u| (0, *u)).collect())
        .unwrap_or_default();
    while let Some((depth, unit)) = stack.pop() {
        out.push((depth, unit));
        if out.len() > units.len() {
            break; // a cycle cannot be stored; this only bounds the walk
        }
        if let Some(kids) = children.get(&Some(unit.id.as_str())) {
            stack.extend(kids.iter().rev().map(|k| (depth + 1, *k)));
        }
    }
    out
}

pub fn units(csrf: &str, units: &[UnitRecord], bound: &BTreeMap<String, Vec<String>>) -> Markup {
    let ordered = tree_order(units);
    // Nested lists, opened and closed as the depth changes.
    let mut tree = String::new();
    let mut depth_open = 0usize;
    for (i, (depth, unit)) in ordered.iter().enumerate() {
        if i == 0 {
            tree.push_str("<ul class=\"tree\">");
            depth_open = 0;
        } else if *depth > depth_open {
            tree.push_str("<ul>");
            depth_open += 1;
        } else {
            tree.push_str("</li>");
            while depth_open > *depth {
                tree.push_str("</ul></li>");
                depth_open -= 1;
            }
        }
        let slugs = bound.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let item = html! {
            li {
                a href=(href(&["units", &unit.id])) { (unit.id) }
                @if let Some(name) = &unit.display_name { " " span.muted { (name) } }
                @for slug in slugs { " " span.chip title="bound connector" { (slug) } }
            }
        }
        .into_string();
        // Leave the <li> open for children.
        tree.push_str(item.strip_suffix("</li>").unwrap_or(&item));
    }
    if !ordered.is_empty() {
        tree.push_str("</li>");
        while depth_open > 0 {
            tree.push_str("</ul></li>");
            depth_open -= 1;
        }
        tree.push_str("</ul>");
    }
    page(
        "Units",
        Some(csrf),
        Section::Units,
        html! {
            h1 { "Units" }
            @if ordered.is_empty() {
                p { "No units yet." }
            } @else {
                nav aria-label="Unit tree" { (PreEscaped(tree)) }
            }
            h2 { "Create or update a unit" }
            form.stack method="post" action="/console/units" {
                (csrf_field(csrf))
                label for="unit-id" { "Unit id" }
                input #unit-id name="id" required pattern="[A-Za-z0-9][A-Za-z0-9._\\-]{0,127}";
                label for="unit-parent" { "Parent (empty for a top-level unit)" }
                select #unit-parent name="parent" {
                    option value="" { "(none)" }
                    @for (depth, u) in &ordered {
                        option value=(u.id) { (indent(*depth)) (u.id) }
                    }
                }
                label for="unit-name" { "Display name (optional)" }
                input #unit-name name="displayName";
                button type="submit" { "Save unit" }
            }
        },
    )
}

fn indent(depth: usize) -> String {
    "\u{a0}\u{a0}".repeat(depth.min(32))
}

/// The tabs of a unit's or agent's pages.
fn tabs(base: &[&str], current: &str, tabs: &[(&str, &str)]) -> Markup {
    html! {
        nav.tabs aria-label="Views" {
            ul {
                @for (slug, label) in tabs {
                    @let segments: Vec<&str> = base.iter().copied().chain((!slug.is_empty()).then_some(*slug)).collect();
                    li {
                        @if *slug == current {
                            a href=(href(&segments)) aria-current="page" { (label) }
                        } @else {
                            a href=(href(&segments)) { (label) }
                        }
                    }
                }
            }
        }
    }
}

const UNIT_TABS: [(&str, &str); 3] = [("", "Overview"), ("tools", "Tools"), ("inbox", "Inbox")];

/// What a unit's overview shows.
pub struct UnitOverview<'a> {
    pub id: &'a str,
    pub parent: Option<&'a str>,
    pub display_name: Option<&'a str>,
    pub children: Vec<&'a str>,
    pub bindings: &'a [BindingView],
    pub connectors: &'a [Connector],
    pub agents: Vec<&'a str>,
    /// The units it may move under, in tree order with their depth.
    pub parent_choices: Vec<(usize, &'a str)>,
}

pub fn unit(csrf: &str, u: &UnitOverview<'_>, message: Option<Markup>) -> Markup {
    let bound: Vec<&str> = u.bindings.iter().map(|b| b.connector.as_str()).collect();
    page(
        &format!("Unit {}", u.id),
        Some(csrf),
        Section::Units,
        html! {
            h1 { "Unit " code { (u.id) } }
            p { a.history href=(super::audit::history_href(&format!("unit:{}", u.id))) { "History of this unit" } }
            (tabs(&["units", u.id], "", &UNIT_TABS))
            @if let Some(m) = message { (m) }
            dl.facts {
                dt { "Display name" } dd { (u.display_name.unwrap_or("—")) }
                dt { "Parent" } dd {
                    @match u.parent {
                        Some(p) => a href=(href(&["units", p])) { (p) },
                        None => "— (top level)",
                    }
                }
                dt { "Children" } dd {
                    @if u.children.is_empty() { "—" }
                    @for (i, c) in u.children.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(href(&["units", c])) { (c) }
                    }
                }
                dt { "Agents" } dd {
                    @if u.agents.is_empty() { "—" }
                    @for (i, a) in u.agents.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(href(&["agents", a])) { (a) }
                    }
                }
            }
            h2 { "Edit" }
            (super::edit::unit_form(csrf, u.id, u.parent, u.display_name, &u.parent_choices))
            h2 { "Bindings" }
            (bindings_table(u.id, u.bindings, u.connectors))
            h2 { "Bind a connector" }
            @let unbound: Vec<&Connector> = u.connectors.iter().filter(|c| !bound.contains(&c.slug.as_str())).collect();
            @if unbound.is_empty() {
                p { "Every installed connector is bound here." }
            } @else {
                form.row method="get" action=(href(&["units", u.id, "bind"])) {
                    label for="bind-slug" { "Connector" }
                    select #bind-slug name="connector" {
                        @for c in &unbound { option value=(c.slug) { (c.slug) " — " (c.display_name) } }
                    }
                    button type="submit" { "Configure…" }
                }
            }
            h2 { "Delete" }
            p.hint { "Deleting a unit unbinds its connectors; a unit with children cannot be deleted." }
            (danger_link(&href(&["units", u.id, "delete"]), "Delete this unit…"))
        },
    )
}

fn bindings_table(unit: &str, bindings: &[BindingView], connectors: &[Connector]) -> Markup {
    // The host masks write-only properties; masking again by the schema also covers
    // secrets in lists and in `additionalProperties`.
    let shown = |b: &BindingView| match connectors.iter().find(|c| c.slug == b.connector) {
        Some(c) => form::masked(&c.config_schema, &b.config),
        None => Value::String(form::MASK.into()),
    };
    html! {
        @if bindings.is_empty() {
            p { "No connector is bound to this unit." }
        } @else {
            div.scroll {
                table {
                    thead { tr { th scope="col" { "Connector" } th scope="col" { "Config" } th scope="col" { "Bound at" } th scope="col" { "Actions" } } }
                    tbody {
                        @for b in bindings {
                            tr {
                                td { a href=(href(&["connectors", &b.connector])) { (b.connector) } }
                                td { code.json { (compact_json(&shown(b))) } }
                                td { (b.bound_at) }
                                td.actions {
                                    a.button href=(bind_href(unit, &b.connector)) { "Rebind" }
                                    (danger_link(&href(&["units", unit, "unbind", &b.connector]), &format!("Unbind {}…", b.connector)))
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn bind_href(unit: &str, slug: &str) -> String {
    format!(
        "{}?connector={}",
        href(&["units", unit, "bind"]),
        &href(&[slug])["/console/".len()..]
    )
}

fn compact_json(v: &Value) -> String {
    connector_model::ids::truncate(&v.to_string(), 400)
}

// ----- tools views --------------------------------------------------------------------

/// Whose tools a Tools view shows.
#[derive(Debug, Clone, Copy)]
pub enum ToolsOf<'a> {
    Unit(&'a str),
    Agent(&'a str),
}

/// The Tools view of CONTRACT §7: Platform (collapsed), Connectors (one group per
/// connector, with an "inherited from" badge linking to the unit whose binding it is),
/// Image (read-only); explicit grants marked.
pub fn tools_view(of: ToolsOf<'_>, tools: &ResolvedTools, query: &str) -> Markup {
    let query = query.trim().to_lowercase();
    let mut platform: Vec<EffectiveTool<'_>> = Vec::new();
    let mut image: Vec<EffectiveTool<'_>> = Vec::new();
    // Keyed by (slug, unit of the binding): an explicit grant of a connector's tool lands
    // in that connector's group.
    let mut connectors: BTreeMap<&str, ConnectorGroup<'_>> = BTreeMap::new();
    for t in tools.iter().filter(|t| tool_matches(t, &query)) {
        match &t.group.provider {
            Provider::Platform(_) => platform.push(t),
            Provider::Image(_) => image.push(t),
            Provider::Connector(c) => {
                let slug = c.info().slug.as_str();
                let group = connectors.entry(slug).or_insert_with(|| ConnectorGroup {
                    display_name: &c.info().display_name,
                    from_unit: None,
                    tools: Vec::new(),
                });
                if group.from_unit.is_none() {
                    // The unit whose binding brought the tools (the subject itself for a
                    // unit's own binding, where the contract reports no inheritance).
                    group.from_unit = t
                        .group
                        .inherited_from_unit
                        .as_deref()
                        .or(t.group.binding_unit.as_deref());
                }
                group.tools.push(t);
            }
        }
    }
    let image_digest = image.iter().find_map(|t| match &t.group.provenance {
        Provenance::Image(d) => Some(d.as_str()),
        _ => None,
    });
    html! {
        section aria-labelledby="tools-platform" {
            h2 #tools-platform { "Platform " span.count { "(" (platform.len()) ")" } }
            details.platform {
                summary { "Every " code { "sv.*" } " tool (" (platform.len()) "), on every unit and agent; read-only" }
                (tool_list(&platform))
            }
        }
        section aria-labelledby="tools-connectors" {
            h2 #tools-connectors { "Connectors " span.count { "(" (connectors.len()) ")" } }
            @if connectors.is_empty() {
                p { "No connector is bound to " (subject_words(of)) " or its units' ancestors." }
            }
            @for (slug, group) in &connectors {
                section.group data-connector=(slug) aria-label=(format!("connector {slug}")) {
                    h3 {
                        code { "connector:" (slug) }
                        " " span.muted { (group.display_name) }
                        " " (binding_badge(of, group.from_unit))
                    }
                    @if let (ToolsOf::Unit(unit), Some(from)) = (of, group.from_unit) {
                        @if unit == from {
                            div.actions {
                                a.button href=(bind_href(unit, slug)) { "Edit binding" }
                                (danger_link(&href(&["units", unit, "unbind", slug]), &format!("Unbind {slug}…")))
                            }
                        }
                    }
                    (tool_list(&group.tools))
                }
            }
        }
        section aria-labelledby="tools-image" {
            h2 #tools-image { "Image " span.count { "(" (image.len()) ")" } }
            @if image.is_empty() {
                p { "The image declares no tools of its own." }
            } @else {
                p.hint { "Declared by the container image"
                    @if let Some(d) = image_digest { " " code { (d) } }
                    "; read-only." }
                (tool_list(&image))
            }
        }
    }
}

/// Whether a tool's id or description contains `query` (lower-cased; empty: every tool).
fn tool_matches(t: &EffectiveTool<'_>, query: &str) -> bool {
    query.is_empty()
        || t.info.name.to_lowercase().contains(query)
        || t.info.description.to_lowercase().contains(query)
}

/// What a Tools page shows besides the tools themselves.
#[derive(Debug, Default)]
pub struct ToolsExtras<'a> {
    /// The subject's explicit grants.
    pub grants: &'a [GrantView],
    /// What the grant form suggests (namespaces and tool ids).
    pub grantable: &'a [String],
    /// The search: only tools whose id or description contains it (case-insensitive).
    pub query: &'a str,
}

/// The search form of a tools list, and how many tools match.
pub fn tool_search(action: &str, query: &str, shown: usize, total: usize) -> Markup {
    html! {
        form.row.search method="get" action=(action) role="search" {
            label for="tool-query" { "Search tools" }
            input #tool-query type="search" name="q" value=(query) placeholder="id or words of the description";
            button type="submit" { "Search" }
            @if !query.is_empty() { a href=(action) { "Show all" } }
        }
        @if !query.is_empty() {
            p.hint #tool-matches { (shown) " of " (total) " tools match " code { (query) } "." }
        }
    }
}

fn matching(tools: &ResolvedTools, query: &str) -> usize {
    let query = query.trim().to_lowercase();
    tools.iter().filter(|t| tool_matches(t, &query)).count()
}

struct ConnectorGroup<'a> {
    display_name: &'a str,
    from_unit: Option<&'a str>,
    tools: Vec<EffectiveTool<'a>>,
}

fn subject_words(of: ToolsOf<'_>) -> &'static str {
    match of {
        ToolsOf::Unit(_) => "this unit",
        ToolsOf::Agent(_) => "this agent's units",
    }
}

fn binding_badge(of: ToolsOf<'_>, from: Option<&str>) -> Markup {
    let Some(from) = from else {
        return html! {};
    };
    let inherited = match of {
        ToolsOf::Unit(unit) => unit != from,
        ToolsOf::Agent(_) => true,
    };
    html! {
        @if inherited {
            a.badge.inherited href=(href(&["units", from, "tools"])) { "inherited from " (from) }
        } @else {
            span.badge { "bound here" }
        }
    }
}

fn tool_list(tools: &[EffectiveTool<'_>]) -> Markup {
    html! {
        ul.tools {
            @for t in tools {
                li {
                    code.tool { (t.info.name) }
                    @if t.group.provenance == Provenance::Explicit { " " span.badge.explicit { "explicit grant" } }
                    (annotation_chips(&t.info.annotations))
                    @if !t.info.description.is_empty() { div.desc.markdown { (super::markdown::render(&t.info.description)) } }
                }
            }
        }
    }
}

fn annotation_chips(a: &ToolAnnotations) -> Markup {
    html! {
        @if a.read_only_hint { " " span.chip { "read-only" } }
        @if a.destructive_hint { " " span.chip.warn { "destructive" } }
        @if a.idempotent_hint { " " span.chip { "idempotent" } }
        @if a.open_world_hint { " " span.chip { "open world" } }
    }
}

pub fn unit_tools(csrf: &str, unit: &str, tools: &ResolvedTools) -> Markup {
    unit_tools_with(csrf, unit, tools, &ToolsExtras::default())
}

/// A unit's Tools page with its explicit grants and a search.
pub fn unit_tools_with(
    csrf: &str,
    unit: &str,
    tools: &ResolvedTools,
    extras: &ToolsExtras<'_>,
) -> Markup {
    let action = href(&["units", unit, "tools"]);
    page(
        &format!("Tools of unit {unit}"),
        Some(csrf),
        Section::Units,
        html! {
            h1 { "Unit " code { (unit) } }
            (tabs(&["units", unit], "tools", &UNIT_TABS))
            p.hint { (tools.len()) " effective tools." }
            (tool_search(&action, extras.query, matching(tools, extras.query), tools.len()))
            (tools_view(ToolsOf::Unit(unit), tools, extras.query))
            (super::actions::grants_section(csrf, ["units", unit], extras.grants, extras.grantable))
        },
    )
}

// ----- binding form ---------------------------------------------------------------------

/// The bind / rebind form of connector `c` on `unit`.
pub fn bind_form(
    csrf: &str,
    unit: &str,
    c: &Connector,
    current: Option<&Value>,
    submitted: Option<&[(String, String)]>,
    errors: &[FieldError],
) -> Markup {
    let fields = form::fields(&c.config_schema);
    let rebind = current.is_some();
    let shown = |f: &Field| -> String {
        if let Some(sub) = submitted {
            if f.kind == FieldKind::Secret {
                return String::new();
            }
            let key = format!("f.{}", f.name);
            let text = sub
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str())
                .unwrap_or_default();
            return match (
                &f.kind,
                c.config_schema
                    .get("properties")
                    .and_then(|p| p.get(&f.name)),
            ) {
                (FieldKind::Json, Some(prop)) => masked_json(prop, text),
                _ => text.to_string(),
            };
        }
        form::shown_value(f, current.and_then(|c| c.get(&f.name)))
    };
    let checked = |f: &Field| -> bool {
        match submitted {
            Some(sub) => sub
                .iter()
                .any(|(k, _)| k.strip_prefix("f.") == Some(&f.name)),
            None => current.and_then(|c| c.get(&f.name)) == Some(&Value::Bool(true)),
        }
    };
    let errors_of = |name: Option<&str>| -> Vec<&str> {
        errors
            .iter()
            .filter(|e| e.field.as_deref() == name)
            .map(|e| e.message.as_str())
            .collect()
    };
    let form_errors = errors_of(None);
    let title = if rebind { "Rebind" } else { "Bind" };
    page(
        &format!("{title} {} on {unit}", c.slug),
        Some(csrf),
        Section::Units,
        html! {
            h1 { (title) " " code { (c.slug) } " on unit " a href=(href(&["units", unit])) { (unit) } }
            p { (c.description) }
            @if !form_errors.is_empty() {
                div.notice.error role="alert" {
                    p { "The configuration was not accepted:" }
                    ul { @for e in &form_errors { li { (e) } } }
                }
            }
            form.stack method="post" action=(href(&["units", unit, "bind", &c.slug])) novalidate {
                (csrf_field(csrf))
                @if fields.is_empty() {
                    @let id = format!("f-{}", form::WHOLE_CONFIG);
                    @let errs = errors_of(Some(form::WHOLE_CONFIG));
                    label for=(id) { "Configuration (JSON)" }
                    p.hint { "This connector's configSchema lists no fields; give the whole configuration as a JSON object." }
                    textarea id=(id) name=(format!("f.{}", form::WHOLE_CONFIG)) rows="6"
                        aria-invalid=(if errs.is_empty() { "false" } else { "true" }) {
                        @if let Some(sub) = submitted {
                            (masked_json(&c.config_schema, sub.iter().find(|(k, _)| k.strip_prefix("f.") == Some(form::WHOLE_CONFIG)).map(|(_, v)| v.as_str()).unwrap_or("")))
                        } @else if let Some(cur) = current {
                            (serde_json::to_string_pretty(cur).unwrap_or_default())
                        }
                    }
                    @for e in &errs { p.field-error { (e) } }
                }
                @for f in &fields {
                    @let id = format!("f-{}", f.name);
                    @let name = format!("f.{}", f.name);
                    @let errs = errors_of(Some(&f.name));
                    @let invalid = if errs.is_empty() { "false" } else { "true" };
                    div.field {
                        @if f.kind == FieldKind::Boolean {
                            label.check {
                                input id=(id) type="checkbox" name=(name) value="true" checked[checked(f)] aria-invalid=(invalid);
                                " " (f.name)
                            }
                        } @else {
                            label for=(id) { (f.name) @if f.required { " " abbr title="required" { "*" } } }
                        }
                        @if let Some(d) = &f.description { p.hint { (d) } }
                        @if let Some(d) = &f.default {
                            p.hint.default { "Default: " code { (default_words(d)) } @if !f.required { " (used when left empty)" } }
                        }
                        @match &f.kind {
                            FieldKind::Boolean => {},
                            FieldKind::Secret => {
                                input id=(id) type="password" name=(name) autocomplete="new-password" aria-invalid=(invalid)
                                    placeholder=(if rebind { "set — leave empty to keep the stored value" } else { "" });
                                p.hint { "Write-only: the stored value is never shown." }
                            },
                            FieldKind::Number { whole } => {
                                input id=(id) type="number" step=(if *whole { "1" } else { "any" }) name=(name) value=(shown(f)) aria-invalid=(invalid);
                            },
                            FieldKind::Choice(options) => {
                                @let value = shown(f);
                                select id=(id) name=(name) aria-invalid=(invalid) {
                                    @if !f.required { option value="" { "(none)" } }
                                    @for o in options { option value=(o) selected[*o == value] { (o) } }
                                }
                            },
                            FieldKind::Lines => {
                                textarea id=(id) name=(name) rows="3" aria-invalid=(invalid) { (shown(f)) }
                                p.hint { "One per line." }
                            },
                            FieldKind::Json => {
                                textarea id=(id) name=(name) rows="4" aria-invalid=(invalid) { (shown(f)) }
                                p.hint { "JSON." }
                            },
                            FieldKind::Text => {
                                input id=(id) type="text" name=(name) value=(shown(f)) aria-invalid=(invalid);
                            },
                        }
                        @for e in &errs { p.field-error { (e) } }
                    }
                }
                button type="submit" { (title) }
            }
            details {
                summary { "configSchema" }
                pre.json { (serde_json::to_string_pretty(&c.config_schema).unwrap_or_default()) }
            }
        },
    )
}

/// A setting's default as the bind form shows it: strings as they are, lists one per
/// comma, anything else as JSON.
fn default_words(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "on".into(),
        Value::Bool(false) => "off".into(),
        other => other.to_string(),
    }
}

/// Submitted JSON text as a refused form shows it again: write-only values masked (an
/// operator types a new secret again, as in a password field). Text that is not JSON is
/// shown as sent, for the operator to correct.
fn masked_json(schema: &Value, text: &str) -> String {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => serde_json::to_string_pretty(&form::masked(schema, &v))
            .unwrap_or_else(|_| text.to_string()),
        Err(_) => text.to_string(),
    }
}

// ----- agents ---------------------------------------------------------------------------

pub fn agents(csrf: &str, agents: &[AgentSummary], units: &[UnitRecord]) -> Markup {
    page(
        "Agents",
        Some(csrf),
        Section::Agents,
        html! {
            h1 { "Agents" }
            @if agents.is_empty() {
                p { "No agents yet." }
            } @else {
                div.scroll {
                    table {
                        thead { tr { th scope="col" { "Agent" } th scope="col" { "Display name" } th scope="col" { "Units (primary first)" } } }
                        tbody {
                            @for a in agents {
                                tr {
                                    td { a href=(href(&["agents", &a.id])) { (a.id) } }
                                    td { (a.display_name.as_deref().unwrap_or("—")) }
                                    td {
                                        @for (i, u) in a.units.iter().enumerate() {
                                            @if i > 0 { ", " }
                                            a href=(href(&["units", u])) { (u) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Create or update an agent" }
            form.stack method="post" action="/console/agents" {
                (csrf_field(csrf))
                label for="agent-id" { "Agent id" }
                input #agent-id name="id" required pattern="[A-Za-z0-9][A-Za-z0-9._\\-]{0,127}";
                label for="agent-units" { "Units, primary first (comma-separated)" }
                input #agent-units name="units" required list="unit-ids";
                datalist #unit-ids { @for u in units { option value=(u.id) {} } }
                label for="agent-name" { "Display name (optional)" }
                input #agent-name name="displayName";
                button type="submit" { "Save agent" }
            }
        },
    )
}

const AGENT_TABS: [(&str, &str); 2] = [("", "Overview"), ("tools", "Tools")];

#[allow(clippy::too_many_arguments)]
pub fn agent(
    csrf: &str,
    id: &str,
    display_name: Option<&str>,
    units: &[String],
    known_units: &[&str],
    tools: &ResolvedTools,
    minted: Option<(&str, &str)>,
    message: Option<Markup>,
) -> Markup {
    page(
        &format!("Agent {id}"),
        Some(csrf),
        Section::Agents,
        html! {
            h1 { "Agent " code { (id) } }
            p { a.history href=(super::audit::history_href(&format!("agent:{id}"))) { "History of this agent" } }
            (tabs(&["agents", id], "", &AGENT_TABS))
            @if let Some(m) = message { (m) }
            dl.facts {
                dt { "Display name" } dd { (display_name.unwrap_or("—")) }
                dt { "Units" } dd {
                    @for (i, u) in units.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(href(&["units", u])) { (u) }
                        @if i == 0 { " " span.muted { "(primary)" } }
                    }
                }
                dt { "Effective tools" } dd { a href=(href(&["agents", id, "tools"])) { (tools.len()) " tools" } }
            }
            h2 { "Edit" }
            (super::edit::agent_form(csrf, id, units, display_name, known_units))
            h2 { "Tokens" }
            @if let Some((token, expires)) = minted {
                div.notice.ok role="status" {
                    p { "A new agent token, valid until " (expires) ". It is shown this once: copy it now." }
                    p { code #minted-token .secret { (token) } }
                }
            }
            form.row method="post" action=(href(&["agents", id, "tokens"])) {
                (csrf_field(csrf))
                label for="ttl" { "Lifetime in seconds (default one hour)" }
                input #ttl type="number" name="ttlSeconds" min="1" step="1";
                button type="submit" { "Mint a token" }
            }
            p.hint { "Revoking stops every token minted for this agent so far, on every replica." }
            (danger_link(&href(&["agents", id, "tokens", "revoke"]), "Revoke all tokens…"))
            h2 { "Delete" }
            (danger_link(&href(&["agents", id, "delete"]), "Delete this agent…"))
        },
    )
}

pub fn agent_tools(csrf: &str, id: &str, tools: &ResolvedTools) -> Markup {
    agent_tools_with(csrf, id, tools, &ToolsExtras::default())
}

/// An agent's Tools page with its explicit grants and a search.
pub fn agent_tools_with(
    csrf: &str,
    id: &str,
    tools: &ResolvedTools,
    extras: &ToolsExtras<'_>,
) -> Markup {
    let action = href(&["agents", id, "tools"]);
    page(
        &format!("Tools of agent {id}"),
        Some(csrf),
        Section::Agents,
        html! {
            h1 { "Agent " code { (id) } }
            (tabs(&["agents", id], "tools", &AGENT_TABS))
            p.hint { (tools.len()) " effective tools." }
            (tool_search(&action, extras.query, matching(tools, extras.query), tools.len()))
            (tools_view(ToolsOf::Agent(id), tools, extras.query))
            (super::actions::grants_section(csrf, ["agents", id], extras.grants, extras.grantable))
            (super::actions::image_tools_forms(csrf, id))
        },
    )
}

// ----- connectors -------------------------------------------------------------------------

pub fn connectors(csrf: &str, list: &[Connector], message: Option<Markup>) -> Markup {
    page(
        "Connectors",
        Some(csrf),
        Section::Connectors,
        html! {
            h1 { "Connectors" }
            @if let Some(m) = message { (m) }
            div.scroll {
                table {
                    thead { tr {
                        th scope="col" { "Slug" } th scope="col" { "Name" } th scope="col" { "Version" }
                        th scope="col" { "Tools" } th scope="col" { "Webhooks" } th scope="col" { "Digest" }
                    } }
                    tbody {
                        @for c in list {
                            tr {
                                td { a href=(href(&["connectors", &c.slug])) { (c.slug) } }
                                td { (c.display_name) }
                                td { (c.version) }
                                td { (c.tools.len()) }
                                td {
                                    @if let Some(w) = &c.webhook {
                                        a href=(href(&["connectors", &c.slug, "deliveries"])) { (scheme_name(w)) }
                                    } @else { "—" }
                                }
                                td { code.digest title=(c.digest) { (short_digest(&c.digest)) } }
                            }
                        }
                    }
                }
            }
            h2 { "Upload a component" }
            (upload_form(csrf, false))
            h2 { "Install from an OCI registry" }
            (super::trust::pull_form(csrf, "", false))
        },
    )
}

fn scheme_name(w: &connector_model::connector::WebhookInfo) -> String {
    serde_json::to_value(w)
        .ok()
        .and_then(|v| v.get("scheme").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "yes".into())
}

fn short_digest(d: &str) -> &str {
    let end = d.char_indices().nth(19).map_or(d.len(), |(i, _)| i);
    &d[..end]
}

fn upload_form(csrf: &str, offer_force: bool) -> Markup {
    html! {
        form.stack method="post" action="/console/connectors" enctype="multipart/form-data" {
            (csrf_field(csrf))
            label for="component" { "Component (.wasm)" }
            input #component type="file" name="component" accept=".wasm,application/wasm" required;
            p.hint { "A new slug installs the connector. The slug of an installed connector rotates it: bindings stay and their grants follow the new tools." }
            label.check {
                input type="checkbox" name="force" value="true" checked[offer_force];
                " If the new version rejects some bindings' configuration, unbind those bindings"
            }
            button type="submit" { "Upload" }
        }
    }
}

/// The answer to an upload the host refused because the new version rejects the
/// configuration of existing bindings (`409 rotation_breaks_bindings`).
pub fn rotation_refused(csrf: &str, message: &str, details: Option<&Value>) -> Markup {
    let broken = details
        .and_then(|d| d.get("bindings"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    page(
        "Rotation refused",
        Some(csrf),
        Section::Connectors,
        html! {
            h1 { "Rotation refused" }
            (notice("error", message))
            p { "Nothing changed: the installed version still runs and every binding stays as it is. "
                "The new version checks each existing binding's configuration against its own configSchema "
                "and its own validation, and these bindings would not pass:" }
            ul {
                @for b in &broken {
                    @let unit = b.get("unitId").and_then(Value::as_str).unwrap_or("?");
                    li {
                        a href=(href(&["units", unit])) { (unit) } ": "
                        @if let Some(m) = b.get("message").and_then(Value::as_str) { (m) }
                        @if let Some(vs) = b.get("violations").and_then(Value::as_array) {
                            @for v in vs {
                                code { (v.get("pointer").and_then(Value::as_str).unwrap_or("")) } " "
                                (v.get("message").and_then(Value::as_str).unwrap_or("")) "; "
                            }
                        }
                    }
                }
            }
            p { "Either rebind those units with a configuration the new version accepts and upload again, "
                "or upload again with the box below ticked: the host then unbinds exactly those bindings "
                "(revoking their grants) and rotates." }
            (upload_form(csrf, true))
        },
    )
}

pub fn connector(csrf: &str, c: &Connector, bound_on: &[String]) -> Markup {
    connector_with(csrf, c, bound_on, "")
}

/// A connector's page; `query` searches its tools.
pub fn connector_with(csrf: &str, c: &Connector, bound_on: &[String], query: &str) -> Markup {
    let q = query.trim().to_lowercase();
    let tools: Vec<&connector_model::connector::ToolInfo> = c
        .tools
        .iter()
        .filter(|t| {
            q.is_empty()
                || t.name.to_lowercase().contains(&q)
                || t.description.to_lowercase().contains(&q)
        })
        .collect();
    page(
        &format!("Connector {}", c.slug),
        Some(csrf),
        Section::Connectors,
        html! {
            h1 { "Connector " code { (c.slug) } }
            p { a.history href=(super::audit::history_href(&format!("connector:{}", c.slug))) { "History of this connector" } }
            div.markdown { (super::markdown::render(&c.description)) }
            dl.facts {
                dt { "Display name" } dd { (c.display_name) }
                dt { "Tool namespace" } dd { code { (c.tool_namespace) ".*" } }
                dt { "Version" } dd { (c.version) }
                dt { "Digest" } dd { code.digest { (c.digest) } }
                dt { "Source" } dd { code { (c.source) } }
                dt { "Signed by" } dd {
                    @match &c.signed_by { Some(key) => code.digest { (key) }, None => "no trusted signature" }
                }
                dt { "World" } dd { code { (c.world) } }
                dt { "Allowed hosts" } dd {
                    @if c.allowed_hosts.is_empty() { "none (no outbound HTTP)" }
                    @for (i, h) in c.allowed_hosts.iter().enumerate() { @if i > 0 { ", " } code { (h) } }
                }
                dt { "Webhooks" } dd {
                    @if let Some(w) = &c.webhook {
                        (scheme_name(w)) " — " a href=(href(&["connectors", &c.slug, "deliveries"])) { "deliveries" }
                    } @else { "none" }
                }
                dt { "Bound on" } dd {
                    @if bound_on.is_empty() { "no unit" }
                    @for (i, u) in bound_on.iter().enumerate() { @if i > 0 { ", " } a href=(href(&["units", u])) { (u) } }
                }
            }
            h2 { "Tools (" (c.tools.len()) ")" }
            (tool_search(&href(&["connectors", &c.slug]), query, tools.len(), c.tools.len()))
            @for t in &tools {
                section.tool-card aria-label=(t.name) {
                    h3 { code { (t.name) } (annotation_chips(&t.annotations)) }
                    div.markdown { (super::markdown::render(&t.description)) }
                    details {
                        summary { "Input schema" }
                        pre.json { (serde_json::to_string_pretty(&t.input_schema).unwrap_or_default()) }
                    }
                    @if let Some(o) = &t.output_schema {
                        details {
                            summary { "Output schema" }
                            pre.json { (serde_json::to_string_pretty(o).unwrap_or_default()) }
                        }
                    }
                }
            }
            h2 { "Binding configuration" }
            (schema_table(&c.config_schema))
            h2 { "Remove" }
            p.hint { "Uninstalls the connector; a bound connector is unbound everywhere first when you confirm that." }
            (danger_link(&href(&["connectors", &c.slug, "remove"]), "Remove this connector…"))
        },
    )
}

/// A `configSchema` as a table of its settings (nested objects' settings as
/// `parent.child`), the JSON itself folded away below.
pub fn schema_table(schema: &Value) -> Markup {
    let mut rows = Vec::new();
    schema_rows(schema, "", &mut rows);
    html! {
        @if rows.is_empty() {
            p { "This connector's configSchema lists no settings: a binding's configuration is a JSON object it accepts." }
        } @else {
            div.scroll {
                table.schema {
                    thead { tr {
                        th scope="col" { "Setting" } th scope="col" { "Type" } th scope="col" { "Default" }
                        th scope="col" { "Secret" } th scope="col" { "Description" }
                    } }
                    tbody {
                        @for r in &rows {
                            tr data-setting=(r.name) {
                                td { code { (r.name) } @if r.required { " " abbr title="required" { "*" } } }
                                td { (r.kind) }
                                td { @match &r.default { Some(d) => code { (d) }, None => "—" } }
                                td { @if r.secret { span.chip.warn { "write-only" } } @else { "no" } }
                                td {
                                    @if !r.title.is_empty() { strong { (r.title) } @if !r.description.is_empty() { " — " } }
                                    (r.description)
                                }
                            }
                        }
                    }
                }
            }
            p.hint { abbr title="required" { "*" } " required. Write-only settings are never shown once stored." }
        }
        details {
            summary { "configSchema as JSON" }
            pre.json { (serde_json::to_string_pretty(schema).unwrap_or_default()) }
        }
    }
}

struct SchemaRow {
    name: String,
    kind: String,
    default: Option<String>,
    secret: bool,
    required: bool,
    title: String,
    description: String,
}

fn schema_rows(schema: &Value, prefix: &str, rows: &mut Vec<SchemaRow>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, prop) in props {
        let full = format!("{prefix}{name}");
        rows.push(SchemaRow {
            name: full.clone(),
            kind: type_words(prop),
            default: prop.get("default").map(default_words),
            secret: form::is_secret(prop),
            required: required.contains(&name.as_str()),
            title: prop
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            description: prop
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
        if rows.len() < 500 {
            schema_rows(prop, &format!("{full}."), rows);
        }
    }
}

/// A property's type in words: `string`, `integer`, `one of: a, b`, `list of string`.
pub fn type_words(prop: &Value) -> String {
    if let Some(choices) = prop.get("enum").and_then(Value::as_array) {
        let list: Vec<String> = choices
            .iter()
            .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string))
            .collect();
        return format!("one of: {}", list.join(", "));
    }
    let types: Vec<&str> = match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut words = match types.as_slice() {
        [] => "any".to_string(),
        ["array"] => match prop.get("items") {
            Some(items) => format!("list of {}", type_words(items)),
            None => "list".to_string(),
        },
        ts => ts.join(" or "),
    };
    if let Some(f) = prop.get("format").and_then(Value::as_str) {
        words.push_str(&format!(" ({f})"));
    }
    words
}

pub fn deliveries(
    csrf: &str,
    slug: &str,
    list: &[DeliveryRecord],
    message: Option<Markup>,
) -> Markup {
    deliveries_with(csrf, slug, list, message, "")
}

/// The statuses the deliveries list filters by.
pub const DELIVERY_STATUSES: [&str; 3] = ["pending", "failed", "done"];

/// A connector's deliveries, newest first; `status` (one of [`DELIVERY_STATUSES`], or
/// empty for all) is the filter they were chosen by.
pub fn deliveries_with(
    csrf: &str,
    slug: &str,
    list: &[DeliveryRecord],
    message: Option<Markup>,
    status: &str,
) -> Markup {
    let here = if status.is_empty() {
        href(&["connectors", slug, "deliveries"])
    } else {
        format!(
            "{}?status={status}",
            href(&["connectors", slug, "deliveries"])
        )
    };
    page(
        &format!("Deliveries of {slug}"),
        Some(csrf),
        Section::Connectors,
        html! {
            h1 { "Webhook deliveries of " a href=(href(&["connectors", slug])) { code { (slug) } } }
            @if let Some(m) = message { (m) }
            form.row.filter method="get" action=(href(&["connectors", slug, "deliveries"])) {
                label for="delivery-status" { "Status" }
                select #delivery-status name="status" {
                    option value="" selected[status.is_empty()] { "all" }
                    @for st in DELIVERY_STATUSES { option value=(st) selected[st == status] { (st) } }
                }
                button type="submit" { "Filter" }
            }
            @if list.is_empty() {
                p { @if status.is_empty() { "No deliveries stored for this connector." } @else { "No " (status) " deliveries among the latest stored." } }
            } @else {
                p.hint { "Newest first, " (list.len()) @if !status.is_empty() { " " (status) } " shown." }
                div.scroll {
                    table.deliveries {
                        thead { tr {
                            th scope="col" { "Delivery" } th scope="col" { "Status" } th scope="col" { "Actions" }
                            th scope="col" { "Received" } th scope="col" { "Event" } th scope="col" { "Attempts" }
                            th scope="col" { "Last error" } th scope="col" { "Routed to" }
                        } }
                        tbody {
                            @for d in list {
                                tr data-delivery=(d.delivery_id) {
                                    td { a href=(href(&["connectors", slug, "deliveries", &d.delivery_id])) { code { (d.delivery_id) } } }
                                    td { span.status.(d.status.as_str()) { (d.status.as_str()) } }
                                    td.actions {
                                        @if d.status.as_str() != "done" {
                                            form.inline method="post" action=(href(&["connectors", slug, "deliveries", &d.delivery_id, "retry"])) {
                                                (csrf_field(csrf))
                                                input type="hidden" name="back" value=(here);
                                                button type="submit" { "Retry" }
                                            }
                                        }
                                    }
                                    td { (d.received_at) }
                                    td { (d.event.as_deref().unwrap_or("—")) }
                                    td { (d.attempts) }
                                    td.error { (d.error.as_deref().unwrap_or("—")) }
                                    td {
                                        @if d.routed_to.is_empty() { "—" }
                                        @for (i, u) in d.routed_to.iter().enumerate() { @if i > 0 { ", " } a href=(href(&["units", u])) { (u) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

// ----- inbox ------------------------------------------------------------------------------

/// A unit's inbox, newest first (as the deliveries): `messages` are the newest before
/// cursor `before` (`None`: the newest of all, and new ones are added live at the top);
/// `older` says whether older messages exist.
pub fn inbox_newest_first(
    csrf: &str,
    unit: &str,
    messages: &[Message],
    before: Option<i64>,
    older: bool,
) -> Markup {
    let base = href(&["units", unit, "inbox"]);
    // The live stream continues after the newest message shown (0: from the start).
    let newest = messages.first().map_or(0, |m| m.cursor);
    let live = before.is_none();
    page(
        &format!("Inbox of {unit}"),
        Some(csrf),
        Section::Units,
        html! {
            h1 { "Unit " code { (unit) } }
            (tabs(&["units", unit], "inbox", &UNIT_TABS))
            p.hint #live-status aria-live="polite" {
                @if live { "Newest first. Messages arriving now appear at the top when scripts run; otherwise reload the page." }
                @else { "Newest first: older messages." }
            }
            div.scroll {
                table.inbox #inbox data-stream=(if live { href(&["units", unit, "inbox", "stream"]) } else { String::new() }) data-after=(newest) {
                    thead { tr {
                        th scope="col" { "Received" } th scope="col" { "Connector" } th scope="col" { "Kind" }
                        th scope="col" { "Thread" } th scope="col" { "Delivery" } th scope="col" { "Payload" }
                    } }
                    tbody {
                        @for m in messages { (message_row(m)) }
                    }
                }
            }
            @if messages.is_empty() { p { "No messages." } }
            nav.pager aria-label="Pages" {
                @if before.is_some() { a href=(base) { "Newest" } " " }
                @if older {
                    @if let Some(oldest) = messages.last() {
                        a href=(format!("{base}?before={}", oldest.cursor)) { "Older messages" }
                    }
                }
            }
        },
    )
}

/// One inbox row (also what the live stream's script builds, from the same fields).
pub fn message_row(m: &Message) -> Markup {
    html! {
        tr {
            td { (m.received_at) }
            td { (m.connector) }
            td.kind { code { (m.kind) } }
            td { (m.thread_key.as_deref().unwrap_or("—")) }
            td { code { (m.delivery_id) } }
            td { code.json { (compact_json(&m.payload)) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(id: &str, parent: Option<&str>) -> UnitRecord {
        UnitRecord {
            id: id.into(),
            parent: parent.map(str::to_string),
            display_name: None,
            created_at: String::new(),
        }
    }

    #[test]
    fn the_tree_puts_parents_before_children() {
        let units = [
            unit("b", Some("a")),
            unit("a", None),
            unit("c", Some("b")),
            unit("z", None),
            unit("a2", Some("a")),
        ];
        let order: Vec<(usize, &str)> = tree_order(&units)
            .into_iter()
            .map(|(d, u)| (d, u.id.as_str()))
            .collect();
        assert_eq!(order, [(0, "a"), (1, "a2"), (1, "b"), (2, "c"), (0, "z")]);
        let page = units_page_html(&units);
        assert_eq!(
            page.matches("<ul").count(),
            page.matches("</ul>").count(),
            "{page}"
        );
        assert_eq!(
            page.matches("<li>").count(),
            page.matches("</li>").count(),
            "{page}"
        );
    }

    fn units_page_html(list: &[UnitRecord]) -> String {
        units("t", list, &BTreeMap::new()).into_string()
    }

    #[test]
    fn user_strings_are_escaped() {
        let mut u = unit("a", None);
        u.display_name = Some("<script>alert(1)</script>".into());
        let page = units_page_html(&[u]);
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;"));
    }

    #[test]
    fn a_refused_bind_form_does_not_echo_nested_secrets() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "auth": {"type": "object", "properties": {
                "token": {"type": "string", "writeOnly": true}}},
            "apiKey": {"type": "string", "format": "password"}
        }});
        let c = Connector {
            slug: "c".parse().expect("a slug"),
            tool_namespace: "c".into(),
            display_name: "C".into(),
            description: String::new(),
            version: "1".into(),
            digest: "sha256:0".into(),
            world: String::new(),
            tools: Vec::new(),
            config_schema: schema,
            webhook: None,
            allowed_hosts: Vec::new(),
            source: connector_model::connector::SOURCE_UPLOAD.to_string(),
            signed_by: None,
        };
        let sent = vec![
            (
                "f.auth".to_string(),
                r#"{"token": "typed-SECRET"}"#.to_string(),
            ),
            ("f.apiKey".to_string(), "typed-SECRET-2".to_string()),
        ];
        let error = FieldError {
            field: Some("auth".into()),
            message: "refused".into(),
        };
        let page = bind_form("t", "u", &c, None, Some(&sent), &[error]).into_string();
        assert!(!page.contains("SECRET"), "{page}");
        assert!(page.contains("***"), "{page}");
    }

    fn connector_with_schema(schema: Value) -> Connector {
        Connector {
            slug: "c".parse().expect("a slug"),
            tool_namespace: "c".into(),
            display_name: "C".into(),
            description: String::new(),
            version: "1".into(),
            digest: "sha256:0".into(),
            world: String::new(),
            tools: Vec::new(),
            config_schema: schema,
            webhook: None,
            allowed_hosts: Vec::new(),
            source: connector_model::connector::SOURCE_UPLOAD.to_string(),
            signed_by: None,
        }
    }

    fn settings_schema() -> Value {
        serde_json::json!({"type": "object", "required": ["owner"], "properties": {
            "owner": {"type": "string", "description": "The <b>owner</b>."},
            "apiUrl": {"type": "string", "format": "uri", "default": "https://api.example.com"},
            "retries": {"type": "integer", "default": 3},
            "verbose": {"type": "boolean", "default": false},
            "token": {"type": "string", "writeOnly": true},
            "labels": {"type": "array", "items": {"type": "string"}, "default": ["a", "b"]},
            "auth": {"type": "object", "properties": {"user": {"type": "string", "default": "bot"}}}
        }})
    }

    #[test]
    fn the_bind_form_shows_each_settings_default() {
        let c = connector_with_schema(settings_schema());
        let page = bind_form("t", "u", &c, None, None, &[]).into_string();
        for shown in [
            "Default: <code>https://api.example.com</code>",
            "Default: <code>3</code>",
            "Default: <code>off</code>",
            "Default: <code>[\"a\",\"b\"]</code>",
        ] {
            let shown = shown.replace("\"", "&quot;");
            assert!(page.contains(&shown), "`{shown}` missing: {page}");
        }
        // Only settings with a default say so.
        assert_eq!(page.matches("Default: ").count(), 4, "{page}");
    }

    #[test]
    fn the_config_schema_is_a_table_of_settings() {
        let page = schema_table(&settings_schema()).into_string();
        let row = |name: &str| -> String {
            let at = page
                .find(&format!("data-setting=\"{name}\""))
                .unwrap_or_else(|| panic!("no row for {name}: {page}"));
            let end = page[at..].find("</tr>").expect("row end") + at;
            page[at..end].to_string()
        };
        let owner = row("owner");
        assert!(owner.contains("title=\"required\""), "{owner}");
        assert!(owner.contains("The &lt;b&gt;owner&lt;/b&gt;."), "{owner}");
        let url = row("apiUrl");
        assert!(
            url.contains("string (uri)") && url.contains("https://api.example.com"),
            "{url}"
        );
        assert!(row("retries").contains("<td>integer</td>"));
        assert!(row("token").contains("write-only"));
        assert!(!row("owner").contains("write-only"));
        assert!(row("labels").contains("list of string"));
        assert!(
            row("auth.user").contains("bot"),
            "nested settings are listed"
        );
        assert!(
            page.contains("configSchema as JSON"),
            "the JSON stays, folded"
        );
    }

    #[test]
    fn paths_are_percent_encoded() {
        assert_eq!(href(&["units", "a.b-c_d"]), "/console/units/a.b-c_d");
        assert_eq!(href(&["x", "a/b?c"]), "/console/x/a%2Fb%3Fc");
    }
}
