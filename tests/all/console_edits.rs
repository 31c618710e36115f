//! The console in headless Chromium (see `console.rs`) for what its other browser tests
//! leave out: accepting a rotation whose pinned tool definitions changed
//! (`trust.pin_tool_definitions`: the changes side by side, then the same file again
//! with the acceptance), and the pre-filled edit forms of a unit (display name, parent)
//! and an agent (units, display name). Screenshots under
//! `target/console-screenshots/edit-*.png`.

use integration_tests::harness::{machine_load, TestHost, OPERATOR_TOKEN};
use reqwest::Method;
use serde_json::json;

use crate::console::Browser;

/// The value of the form field `css`.
async fn value(b: &Browser, css: &str) -> String {
    b.find(css)
        .await
        .prop("value")
        .await
        .expect("value")
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_tool_definitions_are_shown_side_by_side_and_accepted_in_the_browser() {
    let _load = machine_load().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = crate::oci::rotor(dir.path(), "c1", "Rotor.", "Reads the status.").await;
    let v2 = crate::oci::rotor(
        dir.path(),
        "c2",
        "Rotor.",
        "Reads the status, then <b>acts</b>.",
    )
    .await;
    let h = TestHost::start_with(|c| c.trust.pin_tool_definitions = true).await;
    h.install(v1.to_str().expect("path")).await;
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // Upload the new version: refused, its changes side by side, nothing changed.
    b.goto("/console/connectors").await;
    let v2 = std::fs::canonicalize(&v2).expect("the v2 component");
    let v2 = v2.to_str().expect("utf-8 path");
    b.find("#component")
        .await
        .send_keys(v2)
        .await
        .expect("choose the file");
    b.click("form[action='/console/connectors'] button").await;
    // The answer comes at the same path: wait for its text.
    b.wait_text("Tool definitions changed").await;
    assert_eq!(b.text("h1").await, "Tool definitions changed");
    assert_eq!(
        b.text("table.changes tbody tr td code").await,
        "rotor.status"
    );
    assert_eq!(
        b.text("table.changes pre.before").await,
        "Reads the status."
    );
    // The new description's markup is text, not HTML.
    assert_eq!(
        b.text("table.changes pre.after").await,
        "Reads the status, then <b>acts</b>."
    );
    assert!(!b.has("table.changes pre.after b").await, "markup rendered");
    b.shot("edit-tool-changes-side-by-side").await;
    let (_, still) = h.op(Method::GET, "/api/v1/connectors/rotor", None).await;
    assert_eq!(still["tools"][0]["description"], "Reads the status.");

    // Accept: the same file again through the page's acceptance form.
    b.find("form:has(input[name=accept]) input[type=file]")
        .await
        .send_keys(v2)
        .await
        .expect("choose the file");
    b.click("form:has(input[name=accept]) button[type=submit]")
        .await;
    b.wait_path("/console/connectors/rotor").await;
    let notice = b.text("p.notice.ok").await;
    assert!(notice.contains("with these tool changes"), "{notice}");
    b.shot("edit-tool-changes-accepted").await;
    let (_, now) = h.op(Method::GET, "/api/v1/connectors/rotor", None).await;
    assert_eq!(
        now["tools"][0]["description"],
        "Reads the status, then <b>acts</b>."
    );
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_and_an_agent_are_edited_from_forms_holding_their_values() {
    let _load = machine_load().await;
    let h = TestHost::start().await;
    for (id, parent) in [("eng", None), ("ops", None), ("backend", Some("eng"))] {
        h.unit(id, parent).await;
    }
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/backend",
            Some(json!({"parent": "eng", "displayName": "Backend"})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/agents/ada",
            Some(json!({"units": ["eng"], "displayName": "Ada"})),
        )
        .await;
    assert!(s == 200 || s == 201, "{b}");
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // The unit's form holds its name and parent; the unit itself is no choice of parent.
    b.goto("/console/units/backend").await;
    assert_eq!(value(&b, "#edit-unit-name").await, "Backend");
    assert_eq!(value(&b, "#edit-unit-parent").await, "eng");
    assert!(!b.has("#edit-unit-parent option[value=backend]").await);
    b.shot("edit-unit-form").await;
    b.fill("#edit-unit-name", "Backend team").await;
    b.click("#edit-unit-parent option[value=ops]").await;
    b.submit("form.edit button[type=submit]").await;
    b.wait_path("/console/units/backend").await;
    let notice = b.text("p.notice.ok").await;
    assert!(notice.contains("updated"), "{notice}");
    b.shot("edit-unit-saved").await;
    let (_, unit) = h.op(Method::GET, "/api/v1/units/backend", None).await;
    assert_eq!(
        (&unit["parent"], &unit["displayName"]),
        (&json!("ops"), &json!("Backend team")),
        "{unit}"
    );
    // Cleared, the name is gone; the parent stays as the form holds it.
    b.fill("#edit-unit-name", "").await;
    b.submit("form.edit button[type=submit]").await;
    b.wait_path("/console/units/backend").await;
    b.find("p.notice.ok").await;
    let (_, unit) = h.op(Method::GET, "/api/v1/units/backend", None).await;
    assert_eq!(
        (&unit["parent"], &unit["displayName"]),
        (&json!("ops"), &json!(null)),
        "{unit}"
    );

    // The agent's form holds its units and name.
    b.goto("/console/agents/ada").await;
    assert_eq!(value(&b, "#edit-agent-units").await, "eng");
    assert_eq!(value(&b, "#edit-agent-name").await, "Ada");
    b.shot("edit-agent-form").await;
    b.fill("#edit-agent-units", "ops, eng").await;
    b.fill("#edit-agent-name", "Ada Lovelace").await;
    b.submit("form.edit button[type=submit]").await;
    b.wait_path("/console/agents/ada").await;
    let notice = b.text("p.notice.ok").await;
    assert!(notice.contains("updated"), "{notice}");
    b.shot("edit-agent-saved").await;
    let (_, agent) = h.op(Method::GET, "/api/v1/agents/ada", None).await;
    assert_eq!(agent["units"], json!(["ops", "eng"]), "{agent}");
    assert_eq!(agent["displayName"], "Ada Lovelace", "{agent}");
    b.close().await;
}
