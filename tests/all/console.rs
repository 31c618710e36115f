//! The operator console (`/console`, CONTRACT §7): in a real headless Chromium driven
//! through WebDriver (`chromedriver`), and over plain HTTP for what a browser would hide
//! (cookies, CSRF refusals, secrets in page source).
//!
//! Each browser test saves a screenshot of every view it visits under
//! `target/console-screenshots/` for a reviewer to look at. Chromium and chromedriver
//! come from Debian (`.ci/run` installs them); without them the browser tests are skipped,
//! or fail under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use integration_tests::guests;
use integration_tests::harness::{
    free_port, machine_load, now_unix, required, send_standard_webhook, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::json;

// ----- the browser ------------------------------------------------------------------------

/// A program on `PATH` (or at one of `also`).
fn find_program(name: &str, also: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .collect::<Vec<_>>()
    });
    also.iter()
        .map(PathBuf::from)
        .chain(on_path)
        .find(|p| p.is_file())
}

/// chromedriver, running in its own process group so that it and the browsers it starts
/// are ended together when this guard drops (also when a test panics).
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session on a test host, saving screenshots as it goes.
pub(crate) struct Browser {
    pub(crate) client: Client,
    base: String,
    shots: PathBuf,
    // Dropped after the client: ends chromedriver and the browser.
    _driver: Driver,
}

/// Where screenshots go: `target/console-screenshots/`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("create the screenshot directory");
    dir
}

impl Browser {
    /// Starts chromedriver and a headless Chromium, or `None` (skip) when they are not
    /// installed and `CI` is not `true`.
    pub(crate) async fn start(base: &str) -> Option<Browser> {
        let chromium = required(
            "chromium",
            find_program("chromium", &["/usr/bin/chromium"])
                .ok_or_else(|| "no `chromium` on PATH (apt-get install chromium)".to_string()),
        )?;
        let chromedriver = required(
            "chromedriver",
            find_program("chromedriver", &["/usr/bin/chromedriver"]).ok_or_else(|| {
                "no `chromedriver` on PATH (apt-get install chromium-driver)".to_string()
            }),
        )?;
        let port = free_port();
        let child = {
            use std::os::unix::process::CommandExt as _;
            Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()))
        };
        let driver = Driver { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", driver.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port} within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"]
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| panic!("cannot start a WebDriver session in Chromium: {e}"));
        Some(Browser {
            client,
            base: base.to_string(),
            shots: screenshot_dir(),
            _driver: driver,
        })
    }

    pub(crate) async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
    }

    pub(crate) async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("current url");
        url.path().to_string()
    }

    /// Waits until the page's path is `path`.
    pub(crate) async fn wait_path(&self, path: &str) {
        self.wait_address(&format!("to arrive at {path}"), |url| url.path() == path)
            .await;
    }

    /// Waits until the page's address has the query parameter `pair` (`name=value`): a
    /// form that reloads the same path with new parameters has arrived.
    pub(crate) async fn wait_query(&self, pair: &str) {
        self.wait_address(&format!("`{pair}` in the address"), |url| {
            url.query().is_some_and(|q| q.split('&').any(|p| p == pair))
        })
        .await;
    }

    /// Waits (up to 10 s) until the page's address satisfies `arrived`; `expected` says
    /// what was waited for when it does not.
    async fn wait_address(&self, expected: &str, arrived: impl Fn(&reqwest::Url) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let url = self.client.current_url().await.expect("current url");
            if arrived(&url) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "expected {expected}, still at {url}:\n{}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the page's text contains `text` (up to 10 s); the text.
    pub(crate) async fn wait_text(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let body = self.body_text().await;
            if body.contains(text) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} on the page within 10 s:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element `{css}` on {}: {e}", self.base))
    }

    pub(crate) async fn has(&self, css: &str) -> bool {
        !self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("find_all")
            .is_empty()
    }

    pub(crate) async fn fill(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        e.clear().await.expect("clear");
        e.send_keys(text).await.expect("type");
    }

    pub(crate) async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Clicks `css`, a button that sends a form, and waits (up to 10 s) until the browser
    /// has left the page it was on. A form answered by a redirect to its own address keeps
    /// the path, so `wait_path` cannot tell the pages apart, and the old page's notice would
    /// be read as the new one's before the server has even seen the form.
    pub(crate) async fn submit(&self, css: &str) {
        let page = self
            .client
            .find(Locator::Css("html"))
            .await
            .expect("the page's html element");
        self.click(css).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match page.tag_name().await {
                Err(e) if e.is_stale_element_reference() || e.is_no_such_element() => return,
                Err(e) => panic!("after clicking `{css}`: {e}"),
                Ok(_) => {}
            }
            assert!(
                Instant::now() < deadline,
                "clicking `{css}` left the browser on the page it was on:\n{}",
                self.body_text().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.expect("text")
    }

    pub(crate) async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(b) => b.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    pub(crate) async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Saves a screenshot of the current page as `<name>.png`.
    pub(crate) async fn shot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    pub(crate) async fn sign_in(&self, token: &str) {
        self.goto("/console/sign-in").await;
        self.fill("#token", token).await;
        self.click("form.stack button[type=submit]").await;
    }

    pub(crate) async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

// ----- browser tests ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_on_a_top_unit_reaches_the_bottom_agent_and_is_unbound_from_its_badge() {
    // A browser loads the machine: not beside the tests that time latency.
    let _load = machine_load().await;
    let h = TestHost::start().await;
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };

    // Signed out, every page leads to the sign-in form.
    b.goto("/console/units").await;
    b.wait_path("/console/sign-in").await;
    b.shot("sign-in").await;

    // A wrong token is refused and leaves no session.
    b.sign_in("not-the-token").await;
    assert!(
        b.text("p.notice.error")
            .await
            .contains("not the operator token"),
        "{}",
        b.body_text().await
    );
    b.shot("sign-in-wrong-token").await;
    b.goto("/console/units").await;
    b.wait_path("/console/sign-in").await;

    b.sign_in(OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // A three-level tree, built with the unit form.
    for (id, parent) in [("top", ""), ("mid", "top"), ("bottom", "mid")] {
        b.goto("/console/units").await;
        b.fill("#unit-id", id).await;
        if !parent.is_empty() {
            b.find("#unit-parent")
                .await
                .select_by_value(parent)
                .await
                .expect("choose the parent");
        }
        b.click("form[action='/console/units'] button").await;
        b.wait_path(&format!("/console/units/{id}")).await;
    }
    // An agent in the bottom unit, with the agent form.
    b.goto("/console/agents").await;
    b.fill("#agent-id", "bottom-agent").await;
    b.fill("#agent-units", "bottom").await;
    b.fill("#agent-name", "Bottom <agent>").await;
    b.click("form[action='/console/agents'] button").await;
    b.wait_path("/console/agents/bottom-agent").await;
    b.goto("/console/agents").await;
    assert!(b.text("table").await.contains("bottom-agent"));
    b.shot("agents").await;
    b.goto("/console/agents/bottom-agent").await;
    assert!(
        b.body_text().await.contains("Bottom <agent>"),
        "display names are shown as text"
    );

    // Bind acme on the top unit with the form generated from its configSchema.
    b.goto("/console/units/top").await;
    b.shot("unit-overview-unbound").await;
    b.find("#bind-slug")
        .await
        .select_by_value("acme")
        .await
        .expect("choose acme");
    b.click("form[action$='/bind'] button").await;
    b.wait_path("/console/units/top/bind/acme").await;
    b.fill("#f-greeting", "hello from the console").await;
    b.shot("bind-form").await;
    b.click("form[action$='/bind/acme'] button[type=submit]")
        .await;
    b.wait_path("/console/units/top").await;
    assert!(b.text("table").await.contains("hello from the console"));
    b.shot("unit-overview").await;
    let (_, bindings) = h
        .op(Method::GET, "/api/v1/units/top/connectors", None)
        .await;
    assert_eq!(
        bindings["bindings"][0]["config"],
        json!({"greeting": "hello from the console"}),
        "the console bound through the host"
    );

    // The tree shows the nesting and the binding.
    b.goto("/console/units").await;
    let tree = b.text("ul.tree").await;
    assert!(tree.contains("top") && tree.contains("mid") && tree.contains("bottom"));
    assert!(
        b.has("ul.tree > li > ul > li > ul > li a[href='/console/units/bottom']")
            .await,
        "bottom is two levels down"
    );
    b.shot("units-tree").await;

    // The agent's image declares a tool, and the operator grants it arxiv explicitly.
    let digest = format!("sha256:{}", "ab".repeat(32));
    let (s, r) = h
        .op(
            Method::PUT,
            "/api/v1/agents/bottom-agent/image-tools",
            Some(json!({"digest": digest, "tools": [{"name": "helper.search",
                "description": "Searches the <workspace>", "inputSchema": {"type": "object"}}]})),
        )
        .await;
    assert_eq!(s, 200, "{r}");
    let (s, r) = h
        .op(
            Method::POST,
            "/api/v1/agents/bottom-agent/grants",
            Some(json!({"namespace": "arxiv"})),
        )
        .await;
    assert_eq!(s, 201, "{r}");

    // The bottom agent's Tools view: acme under Connectors, inherited from the top unit.
    b.goto("/console/agents/bottom-agent/tools").await;
    let group = b.find("section.group[data-connector='acme']").await;
    let group_text = group.text().await.expect("group text");
    assert!(
        group_text.contains("acme.echo") && group_text.contains("acme.timestamp"),
        "{group_text}"
    );
    let badge = group
        .find(Locator::Css("a.badge.inherited"))
        .await
        .expect("an inherited-from badge");
    assert_eq!(
        badge.text().await.expect("badge text"),
        "inherited from top"
    );
    assert_eq!(
        badge.attr("href").await.expect("href").as_deref(),
        Some("/console/units/top/tools")
    );
    // Platform tools are there, collapsed.
    let platform = b.find("details.platform").await;
    assert_eq!(
        platform.attr("open").await.expect("open attr"),
        None,
        "collapsed"
    );
    assert!(b.source().await.contains("sv.tools.list"));
    // The explicit grant is marked and inherited from nobody.
    let arxiv = b.text("section.group[data-connector='arxiv']").await;
    assert!(
        arxiv.contains("arxiv.search") && arxiv.contains("explicit grant"),
        "{arxiv}"
    );
    assert!(
        !b.has("section.group[data-connector='arxiv'] a.badge.inherited")
            .await
    );
    // The image's tool, read-only, its description as text.
    let image = b.text("section[aria-labelledby='tools-image']").await;
    assert!(
        image.contains("helper.search") && image.contains("Searches the <workspace>"),
        "{image}"
    );
    assert!(
        image.contains("read-only") && image.contains(&digest),
        "{image}"
    );
    assert!(
        !b.has("section[aria-labelledby='tools-image'] form").await,
        "nothing to change there"
    );
    b.shot("agent-tools").await;

    // One click to the unit whose binding it is, and unbind there.
    badge.click().await.expect("follow the badge");
    b.wait_path("/console/units/top/tools").await;
    assert!(b
        .text("section.group[data-connector='acme'] .badge")
        .await
        .contains("bound here"));
    b.shot("unit-tools").await;
    b.click("section.group[data-connector='acme'] a.button.danger")
        .await;
    b.wait_path("/console/units/top/unbind/acme").await;
    assert!(
        b.body_text().await.contains("acme.*"),
        "the confirmation names the grants that go"
    );
    b.shot("confirm-unbind").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/units/top/tools").await;
    assert!(
        b.text("p.notice.ok")
            .await
            .contains("Unbound `acme` from unit `top`"),
        "{}",
        b.body_text().await
    );
    assert!(!b.has("section.group[data-connector='acme']").await);

    // Gone from the bottom agent too.
    b.goto("/console/agents/bottom-agent/tools").await;
    b.find("#tools-connectors").await;
    assert!(!b.has("section.group[data-connector='acme']").await);
    assert!(
        !b.source().await.contains(">acme.echo<"),
        "no acme tool is listed"
    );
    assert!(
        b.has("section.group[data-connector='arxiv']").await,
        "the explicit grant stays"
    );
    let (_, tools) = h
        .op(Method::GET, "/api/v1/agents/bottom-agent/tools", None)
        .await;
    assert!(!tools.to_string().contains("acme."), "{tools}");
    b.shot("agent-tools-after-unbind").await;

    // Tokens: minted (shown once, and it works), then revoked.
    b.goto("/console/agents/bottom-agent").await;
    b.click("form[action$='/tokens'] button").await;
    let token = b.text("#minted-token").await;
    let (s, _) = h
        .as_token(&token, Method::GET, "/api/v1/agents/bottom-agent", None)
        .await;
    assert_eq!(s, 200, "the minted token works");
    b.shot("agent-token-minted").await;
    assert_eq!(
        b.path().await,
        "/console/agents/bottom-agent",
        "minting ends on the agent's page, not on the POST"
    );
    b.click("a[href$='/tokens/revoke']").await;
    b.wait_path("/console/agents/bottom-agent/tokens/revoke")
        .await;
    let (s, _) = h
        .as_token(&token, Method::GET, "/api/v1/agents/bottom-agent", None)
        .await;
    assert_eq!(s, 200, "asking to revoke revokes nothing yet");
    b.shot("confirm-revoke-tokens").await;
    b.click("form.confirm button.danger").await;
    b.wait_path("/console/agents/bottom-agent").await;
    b.find("p.notice.ok").await;
    let (s, _) = h
        .as_token(&token, Method::GET, "/api/v1/agents/bottom-agent", None)
        .await;
    assert_eq!(s, 401, "revoked from the console");
    b.goto("/console/agents/bottom-agent").await;
    assert!(
        !b.source().await.contains(&token),
        "a token is shown once only"
    );
    b.shot("agent").await;

    // Connectors: the list and one connector's tools, digest and hosts.
    b.goto("/console/connectors").await;
    assert!(b.text("table").await.contains("acme"));
    b.shot("connectors").await;
    b.goto("/console/connectors/acme").await;
    let (_, acme) = h.op(Method::GET, "/api/v1/connectors/acme", None).await;
    let page = b.body_text().await;
    assert!(
        page.contains(acme["digest"].as_str().expect("digest")),
        "{page}"
    );
    assert!(page.contains("acme.echo") && page.contains("read-only"));
    b.shot("connector").await;

    // Keyboard: the first Tab stop is the skip link.
    b.goto("/console/units").await;
    b.find("body")
        .await
        .send_keys("\u{E004}")
        .await
        .expect("press Tab");
    let focused = b
        .client
        .execute("return document.activeElement.className", vec![])
        .await
        .expect("active element");
    assert_eq!(focused, json!("skip"));

    // A narrow screen: nothing wider than the viewport.
    b.client.set_window_size(390, 844).await.expect("resize");
    for path in [
        "/console/units",
        "/console/agents/bottom-agent/tools",
        "/console/connectors/acme",
    ] {
        b.goto(path).await;
        let fits = b
            .client
            .execute(
                "return document.documentElement.scrollWidth <= window.innerWidth + 1",
                vec![],
            )
            .await
            .expect("measure");
        assert_eq!(
            fits,
            json!(true),
            "{path} scrolls sideways on a narrow screen"
        );
    }
    b.goto("/console/units/top").await;
    b.shot("unit-overview-narrow").await;

    // Sign out ends the session.
    b.click("form.signout button").await;
    b.wait_path("/console/sign-in").await;
    b.goto("/console/units").await;
    b.wait_path("/console/sign-in").await;
    b.close().await;
}

pub(crate) const SECRET: &str = "whsec_Y29uc29sZS10ZXN0LXNlY3JldC1rZXktMDEyMzQ1Njc4OQ==";

pub(crate) fn event(kind: &str) -> Vec<u8> {
    json!({"messages": [{"route": "r1", "kind": kind, "threadKey": "thread-1", "payload": {"n": 1}}]})
        .to_string()
        .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_inbox_uploads_and_a_forged_post_in_a_browser() {
    let _load = machine_load().await;
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;

    // A delivery that fails: the inbox write fails.
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
    let (_, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/f-1", None)
        .await;
    assert_eq!(d["status"], "failed", "{d}");
    h.inject(None);

    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // The failed delivery, then retried from the page.
    b.goto("/console/connectors/hostile/deliveries").await;
    let row = "tr[data-delivery='f-1']";
    let text = b.text(row).await;
    assert!(text.contains("failed") && text.contains("1"), "{text}");
    assert!(
        !b.text(&format!("{row} td.error")).await.trim().is_empty(),
        "the last error is shown"
    );
    b.shot("deliveries-failed").await;
    b.click(&format!("{row} button")).await;
    b.find("p.notice.ok").await;
    let notice = b.text("p.notice.ok").await;
    assert!(
        notice.contains("accepted") && notice.contains("u1"),
        "{notice}"
    );
    let text = b.text(row).await;
    assert!(text.contains("done") && text.contains("u1"), "{text}");
    assert!(
        !b.has(&format!("{row} button")).await,
        "a done delivery has no retry button"
    );
    b.shot("deliveries-retried").await;
    let (_, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/f-1", None)
        .await;
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_u64()),
        (Some("done"), Some(2)),
        "{d}"
    );

    // The inbox, live: a message delivered while the page is open appears on it.
    b.goto("/console/units/u1/inbox").await;
    assert!(b.text("#inbox tbody").await.contains("first.kind"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.text("#live-status").await.starts_with("Live") {
        assert!(Instant::now() < deadline, "the live stream did not open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (s, _) = send_standard_webhook(
        &h.client,
        &h.url,
        "hostile",
        "l-1",
        &event("live.kind"),
        SECRET,
        now_unix(),
    )
    .await
    .expect("the host answers");
    assert_eq!(s, 202);
    b.find("#inbox tbody tr.fresh").await;
    assert!(b.text("#inbox tbody tr.fresh").await.contains("live.kind"));
    b.shot("inbox-live").await;

    // Upload a new version that would break u1's binding: refused, explained.
    b.goto("/console/connectors").await;
    let v2 = std::fs::canonicalize(guests::HOSTILE_V2).expect("the v2 component");
    b.find("#component")
        .await
        .send_keys(v2.to_str().expect("utf-8 path"))
        .await
        .expect("choose the file");
    b.click("form[action='/console/connectors'] button").await;
    // The answer comes at the same path: wait for its text, not for any h1 (the old
    // page's would do).
    let page = b.wait_text("Rotation refused").await;
    assert!(page.contains("u1") && page.contains("region"), "{page}");
    b.shot("rotation-refused").await;
    let (_, c) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_ne!(c["version"], "2.0.0", "nothing changed");

    // Again with the offered box ticked: rotated, the rejected binding unbound.
    assert!(b
        .find("input[name=force]")
        .await
        .is_selected()
        .await
        .expect("checkbox"));
    b.find("#component")
        .await
        .send_keys(v2.to_str().expect("utf-8 path"))
        .await
        .expect("choose the file");
    b.click("form[action='/console/connectors'] button").await;
    let notice = b.text("p.notice.ok").await;
    assert!(
        notice.contains("Rotated") && notice.contains("2.0.0"),
        "{notice}"
    );
    b.shot("rotation-forced").await;
    let (_, bound) = h.op(Method::GET, "/api/v1/units/u1/connectors", None).await;
    assert_eq!(bound["bindings"], json!([]), "{bound}");

    // Binding v2 without its required `region`: the error is shown next to that field,
    // and the write-only key typed in is not echoed back.
    b.goto("/console/units/u1/bind/hostile").await;
    assert_eq!(
        b.find("#f-apiKey")
            .await
            .attr("type")
            .await
            .expect("type")
            .as_deref(),
        Some("password")
    );
    b.fill("#f-apiKey", "sk-typed-in-the-browser").await;
    b.click("form[action$='/bind/hostile'] button[type=submit]")
        .await;
    let field = b.text(".field:has(#f-region) .field-error").await;
    assert!(field.contains("region"), "{field}");
    assert_eq!(
        b.find("#f-region")
            .await
            .attr("aria-invalid")
            .await
            .expect("attr")
            .as_deref(),
        Some("true")
    );
    assert!(!b.source().await.contains("sk-typed-in-the-browser"));
    b.shot("bind-form-error").await;

    // A forged form on another origin, posting to the console with the session's cookie.
    let console_url = h.url.clone();
    let evil = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let evil_url = format!("http://{}", evil.local_addr().expect("addr"));
    let page = format!(
        "<!doctype html><title>win a prize</title>\
         <form method=post action='{console_url}/console/units'>\
         <input name=id value=forged><input name=csrf value=guessed>\
         <button id=go>Claim</button></form>"
    );
    let evil_server = tokio::spawn(async move {
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let page = page.clone();
                async move { axum::response::Html(page) }
            }),
        );
        let _ = axum::serve(evil, app).await;
    });
    b.client.goto(&evil_url).await.expect("open the other site");
    b.click("#go").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.body_text().await.contains("Cross-site request refused") {
        assert!(
            Instant::now() < deadline,
            "no refusal shown: {}",
            b.body_text().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.shot("cross-site-refused").await;
    evil_server.abort();
    let (s, _) = h.op(Method::GET, "/api/v1/units/forged", None).await;
    assert_eq!(s, 404, "the forged POST created nothing");
    b.close().await;
}

// ----- over plain HTTP --------------------------------------------------------------------

/// A client that follows no redirects and keeps the console cookie by hand.
pub(crate) struct Console {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) cookie: Option<String>,
}

impl Console {
    pub(crate) fn new(base: &str) -> Console {
        Console {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: base.to_string(),
            cookie: None,
        }
    }

    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        form: Option<&[(&str, &str)]>,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            r = r.header("cookie", c);
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        if let Some(f) = form {
            r = r.form(f);
        }
        r.send().await.unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, String) {
        let r = self.request(Method::GET, path, None, &[]).await;
        let s = r.status().as_u16();
        (s, r.text().await.unwrap_or_default())
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        let r = self.request(Method::POST, path, Some(form), headers).await;
        let s = r.status().as_u16();
        (s, r.text().await.unwrap_or_default())
    }

    pub(crate) async fn sign_in(&mut self) {
        let r = self
            .request(
                Method::POST,
                "/console/sign-in",
                Some(&[("token", OPERATOR_TOKEN)]),
                &[],
            )
            .await;
        assert_eq!(r.status(), 303);
        let set = r
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .expect("a session cookie")
            .to_string();
        for part in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
            assert!(set.contains(part), "{set}");
        }
        assert!(!set.contains(OPERATOR_TOKEN), "the cookie is not the token");
        self.cookie = Some(set.split(';').next().expect("name=value").to_string());
    }

    /// The session's CSRF token, read from a page's forms.
    pub(crate) async fn csrf(&self) -> String {
        let (_, page) = self.get("/console/units").await;
        let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
        page[at..].split('"').next().expect("value").to_string()
    }
}

/// A request the console must refuse: why, its form, its extra headers.
type Refused<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<(&'a str, &'a str)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_need_this_sessions_csrf_token_and_this_origin() {
    let h = TestHost::start().await;
    let mut c = Console::new(&h.url);

    let (s, page) = c.post("/console/sign-in", &[("token", "wrong")], &[]).await;
    assert_eq!(s, 401);
    assert!(page.contains("not the operator token"));
    let (s, _) = c
        .post("/console/units", &[("id", "x"), ("csrf", "x")], &[])
        .await;
    assert_eq!(s, 401, "no session, no change");

    c.sign_in().await;
    let r = c.request(Method::GET, "/console/units", None, &[]).await;
    assert_eq!(r.status(), 200);
    let csp = r
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    let page = r.text().await.unwrap_or_default();
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "no asset from another origin"
    );
    let csrf = c.csrf().await;
    let own_origin = h.url.clone();

    let refused: [Refused<'_>; 5] = [
        ("no token", vec![("id", "u-a")], vec![]),
        (
            "a forged token",
            vec![("id", "u-b"), ("csrf", "forged")],
            vec![],
        ),
        (
            "another origin",
            vec![("id", "u-c"), ("csrf", &csrf)],
            vec![("origin", "http://evil.example")],
        ),
        (
            "a cross-site fetch",
            vec![("id", "u-d"), ("csrf", &csrf)],
            vec![("sec-fetch-site", "cross-site")],
        ),
        (
            "a same-site, other-origin fetch",
            vec![("id", "u-e"), ("csrf", &csrf)],
            vec![("sec-fetch-site", "same-site")],
        ),
    ];
    for (why, form, headers) in &refused {
        let (s, page) = c.post("/console/units", form, headers).await;
        assert_eq!(s, 403, "{why}: {page}");
        assert!(
            page.contains("<html"),
            "{why}: refused with a page, not JSON"
        );
    }
    for id in ["u-a", "u-b", "u-c", "u-d", "u-e"] {
        let (s, _) = h
            .op(Method::GET, &format!("/api/v1/units/{id}"), None)
            .await;
        assert_eq!(s, 404, "{id} was not created");
    }

    let (s, _) = c
        .post(
            "/console/units",
            &[("id", "u-ok"), ("csrf", &csrf)],
            &[("origin", &own_origin), ("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(s, 303);
    let (s, _) = h.op(Method::GET, "/api/v1/units/u-ok", None).await;
    assert_eq!(s, 200);

    // An upload (multipart) needs the token too, before the component is looked at.
    let component = std::fs::read(guests::HOSTILE).expect("the hostile component");
    let upload = |token: &str| {
        let mut body = format!(
            "--B0undary\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{token}\r\n\
             --B0undary\r\nContent-Disposition: form-data; name=\"component\"; filename=\"h.wasm\"\r\n\
             Content-Type: application/wasm\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&component);
        body.extend_from_slice(b"\r\n--B0undary--\r\n");
        c.http
            .post(format!("{}/console/connectors", c.base))
            .header("cookie", c.cookie.clone().unwrap_or_default())
            .header("content-type", "multipart/form-data; boundary=B0undary")
            .body(body)
            .send()
    };
    let r = upload("forged").await.expect("upload");
    assert_eq!(r.status(), 403);
    let (s, _) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(s, 404, "a forged upload installs nothing");
    let r = upload(&csrf).await.expect("upload");
    assert_eq!(
        r.status(),
        303,
        "an install redirects to the connector's page"
    );
    let (s, _) = h.op(Method::GET, "/api/v1/connectors/hostile", None).await;
    assert_eq!(s, 200, "the session's own upload installs");

    // Console errors are pages, not the API's JSON; the API is unchanged.
    let r = c
        .request(Method::GET, "/console/no-such-page", None, &[])
        .await;
    assert_eq!(r.status(), 404);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("text/html"));
    let (s, body) = h.op(Method::GET, "/api/v1/units/nope", None).await;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );

    // Sign-out ends the session on the server.
    let (s, _) = c.post("/console/sign-out", &[("csrf", &csrf)], &[]).await;
    assert_eq!(s, 303);
    let (s, _) = c.get("/console/units").await;
    assert_eq!(s, 303, "the old cookie no longer signs in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_shows_a_secret() {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    // v2 takes a write-only `apiKey`.
    h.install(guests::HOSTILE_V2).await;
    h.unit("u", None).await;
    h.agent("a", &["u"]).await;
    let mut c = Console::new(&h.url);
    c.sign_in().await;
    let csrf = c.csrf().await;

    // The form marks the secret field and the connector's own rules answer next to fields.
    let (_, form) = c.get("/console/units/u/bind/hostile").await;
    assert!(
        form.contains("type=\"password\" name=\"f.apiKey\""),
        "{form}"
    );
    let (s, page) = c
        .post(
            "/console/units/u/bind/hostile",
            &[("csrf", &csrf), ("f.apiKey", "sk-first-secret")],
            &[],
        )
        .await;
    assert_eq!(s, 422, "{page}");
    let region_field = page.find("name=\"f.region\"").expect("the region field");
    let error_after = page[region_field..]
        .find("field-error")
        .expect("an error next to a field");
    assert!(
        page[region_field + error_after..].contains("region"),
        "{page}"
    );
    assert!(
        !page.contains("sk-first-secret"),
        "a refused form does not echo the secret"
    );

    const KEY: &str = "sk-live-do-not-show-0123456789";
    let (s, page) = c
        .post(
            "/console/units/u/bind/hostile",
            &[("csrf", &csrf), ("f.region", "eu"), ("f.apiKey", KEY)],
            &[],
        )
        .await;
    assert_eq!(s, 303, "{page}");
    // Rebinding with the secret left empty keeps it.
    let (s, _) = c
        .post(
            "/console/units/u/bind/hostile",
            &[("csrf", &csrf), ("f.region", "us"), ("f.apiKey", "")],
            &[],
        )
        .await;
    assert_eq!(s, 303);
    let stored = h
        .host
        .all_bindings()
        .into_iter()
        .find(|b| b.unit_id == "u")
        .expect("bound");
    assert_eq!(stored.config, json!({"region": "us", "apiKey": KEY}));

    // An agent token, minted from the console: shown in that answer only.
    let (s, _) = c
        .post("/console/agents/a/tokens", &[("csrf", &csrf)], &[])
        .await;
    assert_eq!(s, 303, "minting redirects (post/redirect/get)");
    let (s, minted) = c.get("/console/agents/a").await;
    assert_eq!(s, 200);
    let at = minted
        .find("id=\"minted-token\"")
        .expect("the minted token");
    let token: String = minted[at..]
        .split('>')
        .nth(1)
        .and_then(|t| t.split('<').next())
        .expect("token text")
        .to_string();
    assert!(token.len() > 20, "{token}");

    // Some traffic for the delivery and inbox pages.
    let (s, _) = send_standard_webhook(
        &h.client,
        &h.url,
        "hostile",
        "d-1",
        &event("k"),
        SECRET,
        now_unix(),
    )
    .await
    .expect("answer");
    assert_eq!(s, 202);

    for path in [
        "/console/units",
        "/console/units/u",
        "/console/units/u/tools",
        "/console/units/u/inbox",
        "/console/units/u/bind/hostile",
        "/console/agents",
        "/console/agents/a",
        "/console/agents/a/tools",
        "/console/connectors",
        "/console/connectors/hostile",
        "/console/connectors/hostile/deliveries",
        "/console/connectors/acme",
        "/console/sign-in",
    ] {
        let (s, page) = c.get(path).await;
        assert_eq!(s, 200, "{path}");
        for (what, secret) in [
            ("the write-only config value", KEY),
            ("the operator token", OPERATOR_TOKEN),
            ("the webhook secret", SECRET),
            ("an agent token minted earlier", token.as_str()),
        ] {
            assert!(!page.contains(secret), "{path} shows {what}");
        }
    }
    let (_, page) = c.get("/console/units/u").await;
    assert!(page.contains("***"), "the binding's config is shown masked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_gets_a_page() {
    let h = TestHost::start().await;
    let mut c = Console::new(&h.url);
    c.sign_in().await;

    for (method, path) in [
        (Method::POST, "/console/units/u"),
        (Method::DELETE, "/console/units"),
        (Method::GET, "/console/sign-out"),
    ] {
        let r = c.request(method.clone(), path, None, &[]).await;
        assert_eq!(r.status(), 405, "{method} {path}");
        let kind = r.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(
            kind.starts_with("text/html"),
            "{method} {path}: answered {kind}, not a page"
        );
        assert!(r.headers().contains_key("content-security-policy"));
        let page = r.text().await.unwrap_or_default();
        assert!(page.contains("Method not allowed"), "{page}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessing_the_operator_token_is_braked() {
    let h = TestHost::start().await;
    let mut c = Console::new(&h.url);
    c.sign_in().await;

    // Wrong tokens in a burst brake the address they come from: its next sign-in waits
    // for its turn, and a wrong token then is answered 429 with a wait to honour. The
    // right token still signs in (the brake never refuses it), and a session already
    // signed in goes on working.
    let other = Console::new(&h.url);
    let mut statuses = Vec::new();
    for _ in 0..10 {
        let (s, _) = other
            .post("/console/sign-in", &[("token", "guess")], &[])
            .await;
        statuses.push(s);
    }
    assert_eq!(statuses, [401; 10], "{statuses:?}");
    let started = std::time::Instant::now();
    let r = other
        .request(
            Method::POST,
            "/console/sign-in",
            Some(&[("token", "guess")]),
            &[],
        )
        .await;
    assert_eq!(r.status(), 429, "braked");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "a braked sign-in waits for its turn: {:?}",
        started.elapsed()
    );
    assert!(r.headers().contains_key("retry-after"));
    assert!(r.headers().get("set-cookie").is_none());
    let page = r.text().await.unwrap_or_default();
    assert!(page.contains("the right token still signs in"), "{page}");
    let r = other
        .request(
            Method::POST,
            "/console/sign-in",
            Some(&[("token", OPERATOR_TOKEN)]),
            &[],
        )
        .await;
    assert_eq!(
        r.status(),
        303,
        "the right token signs in from a braked address"
    );
    assert!(r.headers().get("set-cookie").is_some());
    let (s, _) = c.get("/console/units").await;
    assert_eq!(s, 200, "the signed-in session is unaffected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_inbox_stops_at_sign_out() {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    let mut c = Console::new(&h.url);
    c.sign_in().await;
    let csrf = c.csrf().await;
    let body = event("live.kind");
    let deliver = |id: &'static str| {
        send_standard_webhook(&h.client, &h.url, "hostile", id, &body, SECRET, now_unix())
    };
    let mut stream = c
        .request(Method::GET, "/console/units/u1/inbox/stream", None, &[])
        .await;
    assert_eq!(stream.status(), 200);
    let mut seen = String::new();
    let (s, _) = deliver("live-1").await.expect("answer");
    assert_eq!(s, 202);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("live-1") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("no live message while signed in: {other:?} after {seen}"),
        }
    }

    let (s, _) = c.post("/console/sign-out", &[("csrf", &csrf)], &[]).await;
    assert_eq!(s, 303);
    let (s, _) = deliver("live-2").await.expect("answer");
    assert_eq!(s, 202);
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.chunk().await {
                Ok(Some(chunk)) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return,
            }
        }
    })
    .await;
    assert!(
        !seen.contains("live-2"),
        "a signed-out stream still delivers: {seen}"
    );
    assert!(ended.is_ok(), "the stream ends once its session has");
}

/// A rotation that changes pinned tool definitions shows them side by side and asks to
/// accept them; accepting rotates and says what changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_with_pinned_tool_changes_shows_them_and_asks_to_accept() {
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
    let mut c = Console::new(&h.url);
    c.sign_in().await;
    let csrf = c.csrf().await;
    let component = std::fs::read(&v2).expect("v2");
    let upload = |accept: bool| {
        let mut body = format!(
            "--B0undary\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\n{csrf}\r\n"
        );
        if accept {
            body.push_str(
                "--B0undary\r\nContent-Disposition: form-data; name=\"accept\"\r\n\r\ntrue\r\n",
            );
        }
        body.push_str(
            "--B0undary\r\nContent-Disposition: form-data; name=\"component\"; filename=\"c2.wasm\"\r\n\
             Content-Type: application/wasm\r\n\r\n",
        );
        let mut body = body.into_bytes();
        body.extend_from_slice(&component);
        body.extend_from_slice(b"\r\n--B0undary--\r\n");
        c.http
            .post(format!("{}/console/connectors", c.base))
            .header("cookie", c.cookie.clone().unwrap_or_default())
            .header("content-type", "multipart/form-data; boundary=B0undary")
            .body(body)
            .send()
    };
    let r = upload(false).await.expect("upload");
    assert_eq!(r.status(), 409);
    let page = r.text().await.unwrap_or_default();
    assert!(page.contains("Tool definitions changed"), "{page}");
    assert!(
        !page.contains("acceptToolChanges"),
        "the console names the API's query parameter: {page}"
    );
    assert!(
        page.contains("accept them with the button under them"),
        "{page}"
    );
    for shown in [
        "rotor.status",
        "description",
        "Reads the status.",
        "Reads the status, then &lt;b&gt;acts&lt;/b&gt;.",
        "name=\"accept\" value=\"true\"",
    ] {
        assert!(
            page.contains(shown),
            "`{shown}` missing from the page: {page}"
        );
    }
    let (_, still) = h.op(Method::GET, "/api/v1/connectors/rotor", None).await;
    assert_eq!(still["tools"][0]["description"], "Reads the status.");

    let r = upload(true).await.expect("upload");
    assert_eq!(r.status(), 303);
    let (_, page) = c.get("/console/connectors/rotor").await;
    assert!(page.contains("with these tool changes"), "{page}");
    let (_, now) = h.op(Method::GET, "/api/v1/connectors/rotor", None).await;
    assert_eq!(
        now["tools"][0]["description"],
        "Reads the status, then <b>acts</b>."
    );
    assert!(page.contains("Source") && page.contains("upload"), "{page}");
    let (_, again) = c.get("/console/connectors/rotor").await;
    assert!(
        !again.contains("with these tool changes"),
        "the notice is shown once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_view_filters_and_is_reached_from_a_units_history() {
    let _load = machine_load().await;
    let h = TestHost::start().await;
    h.unit("eng", None).await;
    h.agent("ada", &["eng"]).await;
    h.bind("eng", "acme", json!({})).await;
    let (s, _) = h
        .call_tool("ada", "acme.echo", json!({"message": "hi"}))
        .await;
    assert_eq!(s, 200);
    let Some(b) = Browser::start(&h.url).await else {
        return;
    };
    b.sign_in(OPERATOR_TOKEN).await;
    b.wait_path("/console/units").await;

    // From the unit's page to its history: only records about the unit.
    b.goto("/console/units/eng").await;
    b.click("a.history").await;
    b.wait_path("/console/audit").await;
    let targets = b
        .client
        .find_all(Locator::Css("table.audit tbody tr td:nth-child(5)"))
        .await
        .expect("rows");
    assert!(!targets.is_empty(), "{}", b.body_text().await);
    for t in targets {
        assert_eq!(t.text().await.expect("text"), "unit:eng");
    }

    // All records, then only the agent's tool calls, chosen in the form.
    b.goto("/console/audit").await;
    let all = b.body_text().await;
    for text in ["unit.put", "binding.put", "tool.call", "console.sign_in"] {
        assert!(all.contains(text), "`{text}` missing from {all}");
    }
    b.shot("audit").await;
    b.fill("input[name=action]", "tool.call").await;
    b.submit("form.filters button[type=submit]").await;
    let filtered = b.wait_text("tool:acme.echo").await;
    assert!(filtered.contains("tool:acme.echo"), "{filtered}");
    assert!(!filtered.contains("unit.put"), "{filtered}");
    b.shot("audit-filtered").await;
    b.close().await;
}
