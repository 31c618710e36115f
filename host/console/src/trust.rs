//! The console's pages for distribution and trust (CONTRACT.md §10): installing from an
//! OCI registry, and a rotation whose tool definitions changed, the changes side by side
//! with the choice to accept them.

use maud::{html, Markup};
use serde_json::Value;

use super::pages::{csrf_field, notice, page, Section};

/// Install or rotate from `oci://…`.
pub fn pull_form(csrf: &str, source: &str, accept: bool) -> Markup {
    html! {
        form.stack method="post" action="/console/connectors/pull" {
            (csrf_field(csrf))
            label for="source" { "OCI reference" }
            input #source type="text" name="source" value=(source) required
                placeholder="oci://registry.example.com/team/connector:1.2.0";
            p.hint { "The host pulls the component (one application/wasm layer) and installs or rotates it as an upload. A digest (…@sha256:…) pins exactly one build; a tag follows whatever it points to now." }
            label.check {
                input type="checkbox" name="accept" value="true" checked[accept];
                " Accept changed tool descriptions, schemas and annotations"
            }
            label.check {
                input type="checkbox" name="force" value="true";
                " If the new version rejects some bindings' configuration, unbind those bindings"
            }
            button type="submit" { "Install from registry" }
        }
    }
}

/// A component upload that accepts the changes.
fn accept_upload_form(csrf: &str) -> Markup {
    html! {
        form.stack method="post" action="/console/connectors" enctype="multipart/form-data" {
            (csrf_field(csrf))
            input type="hidden" name="accept" value="true";
            label for="component" { "Component (.wasm), the same file again" }
            input #component type="file" name="component" accept=".wasm,application/wasm" required;
            button type="submit" { "Accept the changes and rotate" }
        }
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// The changes of a rotation, before and after side by side.
pub fn changes_table(changes: &[Value]) -> Markup {
    html! {
        table.changes {
            thead { tr { th scope="col" { "Tool" } th scope="col" { "What" } th scope="col" { "Before" } th scope="col" { "After" } } }
            tbody {
                @for c in changes {
                    tr {
                        td { code { (c.get("tool").and_then(Value::as_str).unwrap_or("?")) } }
                        td { (c.get("field").and_then(Value::as_str).unwrap_or("?")) }
                        td { pre.before { (shown(c.get("before").unwrap_or(&Value::Null))) } }
                        td { pre.after { (shown(c.get("after").unwrap_or(&Value::Null))) } }
                    }
                }
            }
        }
    }
}

/// `message` with the API's way of accepting (`?acceptToolChanges=true`) replaced by the
/// console's (the button under the changes).
fn in_console_words(message: &str) -> String {
    message.replace(
        "install again with ?acceptToolChanges=true to accept them",
        "accept them with the button under them",
    )
}

/// The answer to a rotation refused because it changes pinned tool definitions
/// (`409 tool_definitions_changed`): the changes, and how to accept them.
pub fn tool_changes_refused(
    csrf: &str,
    message: &str,
    details: Option<&Value>,
    source: Option<&str>,
) -> Markup {
    let changes = details
        .and_then(|d| d.get("toolChanges"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    page(
        "Tool definitions changed",
        Some(csrf),
        Section::Connectors,
        html! {
            h1 { "Tool definitions changed" }
            (notice("error", &in_console_words(message)))
            p { "Nothing changed: the installed version still runs. A model reads these descriptions and schemas and trusts them; "
                "this host asks before a new version changes them. Review each change:" }
            (changes_table(&changes))
            @match source {
                Some(source) => (pull_form(csrf, source, true)),
                None => (accept_upload_form(csrf)),
            }
        },
    )
}
