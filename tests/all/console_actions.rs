//! The operator console's actions beyond the first views (CONTRACT §7): confirmation
//! before every destructive action, a notice after every change (post/redirect/get),
//! explicit grants, removing a connector, deliveries filtered by status and one
//! delivery's details, tool search, the inbox newest first, and tool descriptions as
//! Markdown that cannot act. In headless Chromium (see `console.rs`), screenshots under
//! `target/console-screenshots/actions-*.png`, and over plain HTTP.

use std::time::Duration;

use integration_tests::guests;
use integration_tests::harness::{machine_load, now_unix, send_standard_webhook, TestHost};
use reqwest::Method;
use serde_json::{json, Value};

use crate::console::{event, Browser, Console, SECRET};

fn has_tool(tools: &Value, name: &str, provenance: &str) -> bool {
    tools["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == name && t["provenance"] == provenance)
}

/// Whether the page is no wider than the window.
async fn fits(b: &Browser) -> bool {
    b.client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth + 1",
            vec![],
        )
        .await
        .expect("measure")
        == json!(true)
}

/// Scrolls the first element matching `css` into view (for a screenshot of it).
async fn scroll_to(b: &Browser, css: &str) {
    b.client
        .execute(
            "document.querySelector(arguments[0]).scrollIntoView()",
            vec![json!(css)],
        )
        .await
        .expect("scroll");
}

async fn host_with_traffic() -> TestHost {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("parent", None).await;
    h.unit("child", Some("parent")).await;
    h.agent("ag", &["child"]).await;
    h.bind("parent", "hostile", json!({"routes": ["r1"]})).await;
    // A failed delivery (its inbox write fails), then two that are routed.
    h.inject(Some(connector_store_testing::faults::Fault::InboxWrite));
    let (s, r) = send_standard_webhook(
        &h.client,
        &h.url,
        "hostile",
        "f-1",
        &event("first.kind"),
        SECRET,
        now_unix(),
    )
    .await
    .expect("the host answers");
    assert_eq!(s, 202, "{r}");
    h.inject(None);
    for (id, kind) in [
        ("d-2", "second.kind"),
        ("d-3", "repository.vulnerability_alert.reintroduced"),
    ] {
        let (s, r) = send_standard_webhook(
            &h.client,
            &h.url,
            "hostile",
            id,
            &event(kind),
            SECRET,
            now_unix(),
        )
        .await
        .expect("the host answers");
        assert_eq!(s, 202, "{r}");
    }
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_change_asks_first_or_says_what_happened_in_a_browser() {
    let _load = machine_load().await;
    let h = host_with_traffic().await;
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(integration_tests::harness::OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // A change ends on a page that says what happened; a reload repeats nothing.
    b.fill("#unit-id", "fresh").await;
    b.click("form[action='/console/units'] button").await;
    b.wait_path("/console/units/fresh").await;
    assert!(
        b.text("p.notice.ok")
            .await
            .contains("Unit `fresh` is created"),
        "{}",
        b.body_text().await
    );
    b.shot("actions-notice-unit-created").await;
    b.client.refresh().await.expect("reload");
    b.find("h1").await;
    assert!(!b.has("p.notice").await, "the notice is shown once");
    assert_eq!(b.path().await, "/console/units/fresh");

    // Explicit grants on a unit: a namespace, a tool id, a refusal, a revocation.
    b.goto("/console/units/child/tools").await;
    b.fill("#grant-target", "arxiv").await;
    b.click("form.grant button").await;
    b.wait_path("/console/units/child/tools").await;
    assert!(
        b.text("p.notice.ok")
            .await
            .contains("Granted `arxiv.*` to unit `child`"),
        "{}",
        b.body_text().await
    );
    b.fill("#grant-target", "acme.echo").await;
    b.click("form.grant button").await;
    b.find("tr[data-grant='acme.echo']").await;
    let (_, tools) = h.op(Method::GET, "/api/v1/units/child/tools", None).await;
    assert!(has_tool(&tools, "arxiv.search", "explicit"), "{tools}");
    assert!(has_tool(&tools, "acme.echo", "explicit"), "{tools}");
    b.fill("#grant-target", "Not A Tool").await;
    b.click("form.grant button").await;
    assert!(
        b.text("p.notice.error")
            .await
            .contains("Nothing was granted"),
        "{}",
        b.body_text().await
    );
    scroll_to(&b, "#tools-grants").await;
    b.shot("actions-unit-tools-grants").await;
    b.click("tr[data-grant='arxiv.*'] a.button.danger").await;
    b.find("form.confirm").await;
    let (_, tools) = h.op(Method::GET, "/api/v1/units/child/tools", None).await;
    assert!(
        has_tool(&tools, "arxiv.search", "explicit"),
        "asking changes nothing"
    );
    b.shot("actions-confirm-revoke-grant").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/units/child/tools").await;
    assert!(b.text("p.notice.ok").await.contains("Revoked"));
    assert!(!b.has("tr[data-grant='arxiv.*']").await);
    let (_, tools) = h.op(Method::GET, "/api/v1/units/child/tools", None).await;
    assert!(!has_tool(&tools, "arxiv.search", "explicit"), "{tools}");

    // On an agent: grant acme, search its tools, revoke.
    b.goto("/console/agents/ag/tools").await;
    b.fill("#grant-target", "acme").await;
    b.click("form.grant button").await;
    b.find("tr[data-grant='acme.*']").await;
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/ag/tools", None).await;
    assert!(has_tool(&tools, "acme.timestamp", "explicit"), "{tools}");
    b.fill("#tool-query", "TIMESTAMP").await;
    b.click("form.search button").await;
    b.find("#tool-matches").await;
    let page = b.source().await;
    assert!(page.contains(">acme.timestamp<"), "{page}");
    assert!(
        !page.contains(">acme.echo<") && !page.contains(">sv.tools.list<"),
        "tools that do not match are left out"
    );
    assert!(b.text("#tool-matches").await.starts_with("1 of "));
    b.shot("actions-agent-tools-search").await;
    b.goto("/console/agents/ag/tools").await;
    b.click("tr[data-grant='acme.*'] a.button.danger").await;
    b.find("form.confirm").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/agents/ag/tools").await;
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/ag/tools", None).await;
    assert!(!has_tool(&tools, "acme.timestamp", "explicit"), "{tools}");

    // A connector's tools, searched.
    b.goto("/console/connectors/acme?q=echo").await;
    let cards = b
        .client
        .find_all(fantoccini::Locator::Css("section.tool-card"))
        .await
        .expect("cards");
    assert_eq!(cards.len(), 1, "only acme.echo matches");
    b.shot("actions-connector-tools-search").await;

    // The image's tools, read from a running image; their descriptions are Markdown, and
    // what HTML they carry is text.
    let digest = format!("sha256:{}", "cd".repeat(32));
    let image_tools = json!([{"name": "helper.find",
        "description": "Finds `files` **fast**. <script>window.pwned = 1</script> \
                        <img src=x onerror=\"window.pwned = 2\">",
        "inputSchema": {"type": "object"}}]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let image_url = format!("http://{}", listener.local_addr().expect("addr"));
    let image_digest = digest.clone();
    let image_server = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/a2a/tools",
            axum::routing::get(move || {
                let (tools, digest) = (image_tools.clone(), image_digest.clone());
                async move { ([("x-image-digest", digest)], axum::Json(tools)) }
            }),
        );
        let _ = axum::serve(listener, app).await;
    });
    b.goto("/console/agents/ag/tools").await;
    b.fill("#image-url", &image_url).await;
    b.click("form.introspect button").await;
    b.wait_path("/console/agents/ag/tools").await;
    let read = b.text("p.notice.ok").await;
    assert!(
        read.contains("Read 1 tools") && read.contains(&digest),
        "{read}"
    );
    image_server.abort();
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/ag/tools", None).await;
    assert!(
        has_tool(&tools, "helper.find", &format!("image:{digest}")),
        "{tools}"
    );
    b.goto("/console/agents/ag/tools").await;
    let image = "section[aria-labelledby='tools-image']";
    assert_eq!(b.text(&format!("{image} .desc code")).await, "files");
    assert_eq!(b.text(&format!("{image} .desc strong")).await, "fast");
    assert!(!b.has(&format!("{image} img")).await, "no image element");
    assert!(!b.has(&format!("{image} .desc script")).await);
    assert!(b
        .text(image)
        .await
        .contains("<script>window.pwned = 1</script>"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pwned = b
        .client
        .execute("return typeof window.pwned", vec![])
        .await
        .expect("run");
    assert_eq!(pwned, json!("undefined"), "a description ran script");
    scroll_to(&b, image).await;
    b.shot("actions-tools-markdown").await;

    // Deliveries: filtered by status, the failed one retried from its details page.
    b.goto("/console/connectors/hostile/deliveries").await;
    b.find("#delivery-status")
        .await
        .select_by_value("failed")
        .await
        .expect("choose failed");
    b.click("form.filter button").await;
    // The filtered page, not the one the click left: both list `f-1`.
    b.wait_query("status=failed").await;
    b.find("tr[data-delivery='f-1']").await;
    assert!(b.has("tr[data-delivery='f-1']").await);
    assert!(
        !b.has("tr[data-delivery='d-2']").await,
        "done ones are hidden"
    );
    b.shot("actions-deliveries-failed").await;
    b.goto("/console/connectors/hostile/deliveries?status=done")
        .await;
    assert!(b.has("tr[data-delivery='d-2']").await && !b.has("tr[data-delivery='f-1']").await);
    // Newest first: d-3 came after d-2.
    let ids = b
        .client
        .execute(
            "return [...document.querySelectorAll('tr[data-delivery]')].map(r => r.dataset.delivery)",
            vec![],
        )
        .await
        .expect("rows");
    assert_eq!(ids, json!(["d-3", "d-2"]), "newest first");

    // At 390 px the Retry button is on screen.
    b.client.set_window_size(390, 844).await.expect("resize");
    b.goto("/console/connectors/hostile/deliveries").await;
    let retry_right = b
        .client
        .execute(
            "const r = document.querySelector(\"tr[data-delivery='f-1'] button\").getBoundingClientRect(); \
             return r.right <= window.innerWidth && r.width > 0",
            vec![],
        )
        .await
        .expect("measure");
    assert_eq!(retry_right, json!(true), "Retry is off-screen at 390 px");
    assert!(fits(&b).await, "the deliveries page scrolls sideways");
    b.shot("actions-deliveries-narrow").await;

    // The inbox: newest first, its Kind column unbroken at 390 px.
    b.goto("/console/units/parent/inbox").await;
    let kinds = b
        .client
        .execute(
            "return [...document.querySelectorAll('#inbox tbody td.kind')].map(c => c.textContent)",
            vec![],
        )
        .await
        .expect("kinds");
    assert_eq!(
        kinds,
        json!(["repository.vulnerability_alert.reintroduced", "second.kind"]),
        "newest first"
    );
    let one_line = b
        .client
        .execute(
            "return [...document.querySelectorAll('#inbox td.kind code')].every(c => c.getClientRects().length === 1)",
            vec![],
        )
        .await
        .expect("measure");
    assert_eq!(one_line, json!(true), "a kind broke across lines");
    b.shot("actions-inbox-narrow").await;
    b.client.set_window_size(1280, 900).await.expect("resize");
    b.goto("/console/units/parent/inbox").await;
    b.shot("actions-inbox-newest-first").await;

    b.goto("/console/connectors/hostile/deliveries?status=failed")
        .await;
    b.click("tr[data-delivery='f-1'] a").await;
    b.wait_path("/console/connectors/hostile/deliveries/f-1")
        .await;
    let headers = b.text("table.headers").await;
    assert!(
        headers.contains("webhook-id") && headers.contains("content-type"),
        "{headers}"
    );
    assert!(b.text("#payload").await.contains("first.kind"));
    b.shot("actions-delivery-details").await;
    b.click("form[action$='/retry'] button").await;
    b.wait_path("/console/connectors/hostile/deliveries/f-1")
        .await;
    assert!(b.text("p.notice.ok").await.contains("accepted"));
    b.shot("actions-delivery-retried").await;
    b.client.refresh().await.expect("reload");
    b.find("h1").await;
    let (_, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/f-1", None)
        .await;
    assert_eq!(
        d["attempts"], 2,
        "a reload after Retry retries nothing: {d}"
    );

    // Removing a bound connector: asked, refused without the box, done with it.
    b.goto("/console/connectors/acme").await;
    let greeting = b.text("table.schema tr[data-setting='greeting']").await;
    assert!(
        greeting.contains("string") && greeting.contains("SPRING_CONNECTOR_ACME_GREETING"),
        "the settings as a table: {greeting}"
    );
    b.shot("actions-connector-schema").await;
    b.goto("/console/connectors/hostile").await;
    b.click("a[href='/console/connectors/hostile/remove']")
        .await;
    b.wait_path("/console/connectors/hostile/remove").await;
    assert!(b.body_text().await.contains("parent"));
    b.shot("actions-confirm-remove-connector").await;
    b.click("form.confirm button.danger").await;
    b.find("p.notice.error").await;
    assert_eq!(b.path().await, "/console/connectors/hostile/remove");
    let (s, _) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(s, 200, "a bound connector stays without the box ticked");
    b.click("#remove-force").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/connectors").await;
    let removed = b.text("p.notice.ok").await;
    assert!(
        removed.contains("Removed connector `hostile`") && removed.contains("parent"),
        "{removed}"
    );
    b.shot("actions-connector-removed").await;
    let (s, _) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(s, 404);

    // Deleting: an agent; a unit with children is refused; Cancel changes nothing.
    b.goto("/console/agents/ag").await;
    b.click("a[href='/console/agents/ag/delete']").await;
    b.wait_path("/console/agents/ag/delete").await;
    b.shot("actions-confirm-delete-agent").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/agents").await;
    assert!(b
        .text("p.notice.ok")
        .await
        .contains("Agent `ag` is deleted"));
    let (s, _) = h.op(Method::GET, "/api/v1/agents/ag", None).await;
    assert_eq!(s, 404);

    b.goto("/console/units/parent").await;
    b.click("a[href='/console/units/parent/delete']").await;
    assert!(b.body_text().await.contains("has children"));
    assert!(!b.has("form.confirm").await);
    b.shot("actions-delete-unit-refused").await;
    b.goto("/console/units/child").await;
    b.click("a[href='/console/units/child/delete']").await;
    b.wait_path("/console/units/child/delete").await;
    b.shot("actions-confirm-delete-unit").await;
    b.click("form.confirm a.button.secondary").await;
    b.wait_path("/console/units/child").await;
    let (s, _) = h.op(Method::GET, "/api/v1/units/child", None).await;
    assert_eq!(s, 200, "Cancel deletes nothing");
    b.click("a[href='/console/units/child/delete']").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/units").await;
    assert!(b
        .text("p.notice.ok")
        .await
        .contains("Unit `child` is deleted"));
    let (s, _) = h.op(Method::GET, "/api/v1/units/child", None).await;
    assert_eq!(s, 404);
    b.close().await;
}

/// Over HTTP: a confirmation page changes nothing, the action needs the session's CSRF
/// token and ends with a redirect, and its notice is shown once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmations_change_nothing_and_actions_redirect_with_a_notice() {
    let h = TestHost::start().await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    h.bind("u", "acme", json!({})).await;
    let (s, r) = h
        .op(
            Method::POST,
            "/api/v1/agents/a/grants",
            Some(json!({"namespace": "arxiv"})),
        )
        .await;
    assert_eq!(s, 201, "{r}");
    let mut c = Console::new(&h.url);
    c.sign_in().await;
    let csrf = c.csrf().await;

    let confirmations = [
        "/console/units/u/delete",
        "/console/units/u/unbind/acme",
        "/console/agents/a/tokens/revoke",
        "/console/agents/a/delete",
        "/console/agents/a/grants/arxiv.%2A/revoke",
        "/console/connectors/acme/remove",
    ];
    for path in confirmations {
        let (s, page) = c.get(path).await;
        assert_eq!(s, 200, "{path}: {page}");
        assert!(page.contains("class=\"stack confirm\""), "{path}: {page}");
        // Without the token, the action is refused.
        let (s, _) = c.post(path, &[], &[]).await;
        assert_eq!(s, 403, "{path} without a CSRF token");
    }
    for (path, what) in [
        ("/api/v1/units/u", "unit"),
        ("/api/v1/agents/a", "agent"),
        ("/api/v1/connectors/acme", "connector"),
    ] {
        let (s, _) = h.op(Method::GET, path, None).await;
        assert_eq!(s, 200, "the {what} is untouched");
    }
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    assert!(has_tool(&tools, "arxiv.search", "explicit"), "{tools}");
    assert!(has_tool(&tools, "acme.echo", "connector:acme"), "{tools}");

    // The grant form, then its revocation: redirects, notices once.
    let (s, _) = c
        .post(
            "/console/units/u/grants",
            &[("csrf", &csrf), ("target", "arxiv.search")],
            &[],
        )
        .await;
    assert_eq!(s, 303);
    let (_, page) = c.get("/console/units/u/tools").await;
    assert!(
        page.contains("Granted `arxiv.search` to unit `u`"),
        "{page}"
    );
    let (_, page) = c.get("/console/units/u/tools").await;
    assert!(!page.contains("Granted `"), "the notice is shown once");
    let (s, _) = c
        .post(
            "/console/agents/a/grants/arxiv.%2A/revoke",
            &[("csrf", &csrf)],
            &[],
        )
        .await;
    assert_eq!(s, 303);
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    assert!(!has_tool(&tools, "arxiv.search", "explicit"), "{tools}");

    // The image's tools as JSON.
    let digest = format!("sha256:{}", "ef".repeat(32));
    let tools_json = json!([{"name": "helper.run", "description": "Runs.",
        "inputSchema": {"type": "object"}}])
    .to_string();
    let (s, _) = c
        .post(
            "/console/agents/a/image-tools",
            &[("csrf", &csrf), ("digest", &digest), ("tools", &tools_json)],
            &[],
        )
        .await;
    assert_eq!(s, 303);
    let (_, page) = c.get("/console/agents/a/tools").await;
    assert!(page.contains("Stored 1 image tools"), "{page}");
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/a/tools", None).await;
    assert!(
        has_tool(&tools, "helper.run", &format!("image:{digest}")),
        "{tools}"
    );
    let (s, _) = c
        .post(
            "/console/agents/a/image-tools",
            &[("csrf", &csrf), ("digest", &digest), ("tools", "[")],
            &[],
        )
        .await;
    assert_eq!(s, 303);
    let (_, page) = c.get("/console/agents/a/tools").await;
    assert!(page.contains("The tools are not JSON"), "{page}");

    // Revoking a grant that is not there, or a status that does not exist: said so.
    let (s, page) = c.get("/console/agents/a/grants/nope.%2A/revoke").await;
    assert_eq!(s, 409, "{page}");
    let (s, _) = c
        .get("/console/connectors/acme/deliveries?status=lost")
        .await;
    assert_eq!(s, 400);

    // A retry of a delivery that does not exist still ends on a GET page.
    let (s, _) = c
        .post(
            "/console/connectors/acme/deliveries/none/retry",
            &[("csrf", &csrf)],
            &[],
        )
        .await;
    assert_eq!(s, 303, "retry redirects whatever its outcome");
    let (_, page) = c.get("/console/connectors/acme/deliveries").await;
    assert!(page.contains("failed again"), "{page}");
}

/// A connector whose settings have defaults and a secret (the declarative `github-file`
/// example): its page lists them as a table, and the bind form shows each default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_with_defaults_in_the_table_and_the_bind_form() {
    let _load = machine_load().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let component = crate::declarative::pack(
        &crate::declarative::example("github-file.yaml"),
        dir.path(),
        &[],
    )
    .await;
    let h = TestHost::start().await;
    let (s, body) =
        integration_tests::harness::upload_component(&h.client, &h.url, component, "").await;
    assert_eq!(s, 201, "{body}");
    h.unit("docs", None).await;
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(integration_tests::harness::OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    b.goto("/console/connectors/gh-file").await;
    let api_url = b
        .text("table.schema tr[data-setting='github.api_url']")
        .await;
    assert!(
        api_url.contains("https://api.github.com") && api_url.contains("GitHub API URL"),
        "{api_url}"
    );
    assert!(
        !api_url.contains("\"https"),
        "a default reads as the form shows it"
    );
    let token = b.text("table.schema tr[data-setting='github.token']").await;
    assert!(token.contains("write-only"), "{token}");
    scroll_to(&b, "table.schema").await;
    b.shot("actions-connector-settings-table").await;

    b.goto("/console/units/docs/bind/gh-file").await;
    let field = b.text(".field:has([name='f.github.api_url'])").await;
    assert!(
        field.contains("Default: https://api.github.com"),
        "the bind form shows the default: {field}"
    );
    assert!(
        !b.text(".field:has([name='f.github.owner'])")
            .await
            .contains("Default:"),
        "a setting without a default says none"
    );
    b.shot("actions-bind-form-defaults").await;

    // Bind, then rebind from the unit's page: each ends there, saying which it was.
    b.fill("[name='f.github.owner']", "\"octo\"").await;
    b.fill("[name='f.github.repo']", "\"docs\"").await;
    b.fill("[name='f.github.token']", "ghp_console_rebind_0123456789")
        .await;
    b.click("form[action$='/bind/gh-file'] button[type=submit]")
        .await;
    b.wait_path("/console/units/docs").await;
    assert!(
        b.text("p.notice.ok")
            .await
            .contains("Bound `gh-file` on unit `docs`"),
        "{}",
        b.body_text().await
    );
    b.click("td.actions a.button[href*='bind']").await;
    b.wait_path("/console/units/docs/bind/gh-file").await;
    b.fill("[name='f.github.owner']", "\"octo-2\"").await;
    b.click("form[action$='/bind/gh-file'] button[type=submit]")
        .await;
    b.wait_path("/console/units/docs").await;
    assert!(
        b.text("p.notice.ok")
            .await
            .contains("now has the new configuration"),
        "{}",
        b.body_text().await
    );
    b.shot("actions-rebound").await;
    let stored = h
        .host
        .all_bindings()
        .into_iter()
        .find(|b| b.unit_id == "docs")
        .expect("bound");
    assert_eq!(stored.config["github.owner"], "octo-2");
    assert_eq!(
        stored.config["github.token"], "ghp_console_rebind_0123456789",
        "the write-only token left empty is kept"
    );
    b.close().await;
}

/// Installing from an OCI registry (the CNCF distribution registry on 127.0.0.1) ends on
/// the new connector's page, which says what was installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_from_a_registry_ends_on_the_connectors_page() {
    let _load = machine_load().await;
    let Some(registry) = integration_tests::registry::Registry::start().await else {
        return;
    };
    let reference = registry.reference("team/hostile:1");
    let digest = crate::oci::push(std::path::Path::new(guests::HOSTILE), &reference, None).await;
    let h = TestHost::start().await;
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(integration_tests::harness::OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;
    b.goto("/console/connectors").await;
    b.fill("#source", &reference).await;
    b.click("form[action='/console/connectors/pull'] button")
        .await;
    b.wait_path("/console/connectors/hostile").await;
    let installed = b.text("p.notice.ok").await;
    assert!(
        installed.contains("Installed `hostile`") && installed.contains(&digest),
        "{installed}"
    );
    b.shot("actions-installed-from-registry").await;
    let (s, c) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(s, 200, "{c}");
    assert!(
        c["source"]
            .as_str()
            .is_some_and(|src| src.ends_with(&digest)),
        "installed from the pushed manifest: {c}"
    );
    b.close().await;
}
