//! Pre-filled edit forms for a unit (display name, parent) and an agent (units, display
//! name). They post to the same handlers as the create forms, whose write replaces the
//! whole unit or agent (the API's `PUT`), so each field starts with its current value:
//! changing one keeps the others.

use maud::{html, Markup};

use super::pages::csrf_field;

/// The form on a unit's page. `parents` are the units it may move under, in tree order
/// with their depth (itself and the units below it left out: the host refuses a cycle).
pub fn unit_form(
    csrf: &str,
    id: &str,
    parent: Option<&str>,
    display_name: Option<&str>,
    parents: &[(usize, &str)],
) -> Markup {
    html! {
        form.stack.edit method="post" action="/console/units" {
            (csrf_field(csrf))
            input type="hidden" name="id" value=(id);
            label for="edit-unit-name" { "Display name (empty for none)" }
            input #edit-unit-name name="displayName" value=(display_name.unwrap_or(""));
            label for="edit-unit-parent" { "Parent (empty for a top-level unit)" }
            select #edit-unit-parent name="parent" {
                option value="" selected[parent.is_none()] { "(none)" }
                @for (depth, u) in parents {
                    option value=(u) selected[parent == Some(*u)] {
                        ("\u{a0}\u{a0}".repeat(*depth)) (u)
                    }
                }
            }
            button type="submit" { "Save changes" }
        }
    }
}

/// The form on an agent's page.
pub fn agent_form(
    csrf: &str,
    id: &str,
    units: &[String],
    display_name: Option<&str>,
    known_units: &[&str],
) -> Markup {
    html! {
        form.stack.edit method="post" action="/console/agents" {
            (csrf_field(csrf))
            input type="hidden" name="id" value=(id);
            label for="edit-agent-units" { "Units, primary first (comma-separated)" }
            input #edit-agent-units name="units" required list="edit-unit-ids" value=(units.join(", "));
            datalist #edit-unit-ids { @for u in known_units { option value=(u) {} } }
            label for="edit-agent-name" { "Display name (empty for none)" }
            input #edit-agent-name name="displayName" value=(display_name.unwrap_or(""));
            button type="submit" { "Save changes" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_hold_the_current_values() {
        let unit = unit_form(
            "c",
            "backend",
            Some("eng"),
            Some("Back <end>"),
            &[(0, "eng"), (0, "ops")],
        )
        .into_string();
        assert!(unit.contains(r#"name="id" value="backend""#), "{unit}");
        assert!(unit.contains(r#"value="Back &lt;end&gt;""#), "{unit}");
        assert!(unit.contains(r#"<option value="eng" selected>"#), "{unit}");
        assert!(unit.contains(r#"<option value="ops">"#), "{unit}");
        let agent = agent_form(
            "c",
            "ada",
            &["eng".into(), "ops".into()],
            None,
            &["eng", "ops"],
        )
        .into_string();
        assert!(agent.contains(r#"value="eng, ops""#), "{agent}");
        assert!(
            agent.contains(r#"id="edit-agent-name" name="displayName" value="""#),
            "{agent}"
        );
    }
}
