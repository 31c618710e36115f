//! The console's reads answer the same however much is stored: a failed delivery behind
//! more newer deliveries than any fixed look-back is still found by the status filter,
//! and a unit's inbox shows its newest page with a link to the older ones (over plain
//! HTTP, see `console.rs`).

use futures::StreamExt;
use integration_tests::guests;
use integration_tests::harness::{now_unix, send_standard_webhook, TestHost};
use serde_json::json;

use crate::console::{event, Console, SECRET};

/// Newer deliveries than the status filter once looked through (2,000).
const NEWER: usize = 2_100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_behind_thousands_of_newer_ones_is_found_by_its_status() {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("team", None).await;
    h.bind("team", "hostile", json!({"routes": ["r1"]})).await;
    // The oldest delivery fails (its inbox write fails), every newer one is routed.
    h.inject(Some(connector_store_testing::faults::Fault::InboxWrite));
    let (s, r) = send_standard_webhook(
        &h.client,
        &h.url,
        "hostile",
        "oldest-failed",
        &event("first.kind"),
        SECRET,
        now_unix(),
    )
    .await
    .expect("the host answers");
    assert_eq!(s, 202, "{r}");
    h.inject(None);
    let sent = futures::stream::iter(0..NEWER)
        .map(|n| {
            let h = &h;
            async move {
                send_standard_webhook(
                    &h.client,
                    &h.url,
                    "hostile",
                    &format!("routed-{n:05}"),
                    &event("later.kind"),
                    SECRET,
                    now_unix(),
                )
                .await
                .map(|(s, _)| s)
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(sent.iter().all(|s| *s == Some(202)), "every delivery taken");

    let mut c = Console::new(&h.url);
    c.sign_in().await;
    let (s, page) = c
        .get("/console/connectors/hostile/deliveries?status=failed")
        .await;
    assert_eq!(s, 200);
    assert!(
        page.contains("oldest-failed"),
        "the failed delivery is listed behind {NEWER} newer ones"
    );
    assert!(!page.contains("routed-"), "only failed ones are listed");
    let (_, done) = c
        .get("/console/connectors/hostile/deliveries?status=done")
        .await;
    assert!(
        done.contains("routed-") && !done.contains("oldest-failed"),
        "done ones only"
    );

    // The inbox: its newest page first, and a link to the older messages.
    let (s, inbox) = c.get("/console/units/team/inbox").await;
    assert_eq!(s, 200);
    assert_eq!(inbox.matches("later.kind").count(), 100, "one page of 100");
    let older = inbox
        .split("href=\"/console/units/team/inbox?before=")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to the older messages");
    let cursor: i64 = older.parse().expect("a cursor");
    let (s, before) = c
        .get(&format!("/console/units/team/inbox?before={cursor}"))
        .await;
    assert_eq!(s, 200);
    assert_eq!(before.matches("later.kind").count(), 100, "the page before");
}
