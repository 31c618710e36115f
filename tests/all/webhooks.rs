//! Webhook ingestion end to end: signatures, de-duplication, routing and fan-out, filters,
//! failures and retries, unit inboxes (paging and SSE), and a host killed with SIGKILL.

use connector_store::DeliveryQueue as _;
use connector_store_testing::faults::Fault;
use std::time::Duration;

use connector_host::webhooks::verify::standard_signature;
use futures::StreamExt;
use integration_tests::guests;
use integration_tests::harness::{
    now_unix, send_standard_webhook, ServerProcess, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Like [`deliver`], but a connection the server dropped (it was killed) is `None`.
async fn try_deliver(
    client: &reqwest::Client,
    base: &str,
    slug: &str,
    id: &str,
    body: &Value,
    secret: &str,
    ts: i64,
) -> Option<(u16, Value)> {
    let bytes = serde_json::to_vec(body).ok()?;
    send_standard_webhook(client, base, slug, id, &bytes, secret, ts).await
}

/// Sends a Standard Webhooks delivery to `slug`; returns (status, body).
async fn deliver(
    client: &reqwest::Client,
    base: &str,
    slug: &str,
    id: &str,
    body: &Value,
    secret: &str,
    ts: i64,
) -> (u16, Value) {
    try_deliver(client, base, slug, id, body, secret, ts)
        .await
        .unwrap_or_else(|| panic!("delivery {id} to {base} got no answer"))
}

fn event(route: &str, kind: &str) -> Value {
    json!({"messages": [{"route": route, "kind": kind, "threadKey": "thread-1", "payload": {"n": 1}}]})
}

async fn webhook_host() -> TestHost {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
        c.max_webhook_bytes = 64 * 1024;
    })
    .await;
    h.install(guests::HOSTILE).await;
    for u in ["u1", "u2", "u3"] {
        h.unit(u, None).await;
    }
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    h.bind("u2", "hostile", json!({"routes": ["r1", "r9"]}))
        .await;
    h.bind("u3", "hostile", json!({"routes": ["r2"]})).await;
    h
}

async fn inbox(h: &TestHost, unit: &str) -> Vec<Value> {
    let (s, b) = h
        .op(Method::GET, &format!("/api/v1/units/{unit}/messages"), None)
        .await;
    assert_eq!(s, 200, "{b}");
    b["messages"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_fan_out_once_and_duplicates_are_answered() {
    let h = webhook_host().await;
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "d-1",
        &event("r1", "issue.opened"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    assert_eq!(b["status"], "accepted");
    assert_eq!(b["delivery"], "d-1");
    let mut routed: Vec<String> = b["routedTo"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    routed.sort();
    assert_eq!(routed, ["u1", "u2"]);

    let m = inbox(&h, "u1").await;
    assert_eq!(m.len(), 1);
    assert_eq!(m[0]["kind"], "issue.opened");
    assert_eq!(m[0]["unitId"], "u1");
    assert_eq!(m[0]["connector"], "hostile");
    assert_eq!(m[0]["deliveryId"], "d-1");
    assert_eq!(m[0]["threadKey"], "thread-1");
    assert_eq!(m[0]["payload"], json!({"n": 1}));
    assert!(m[0]["id"].as_str().is_some() && m[0]["receivedAt"].as_str().is_some());
    assert_eq!(inbox(&h, "u2").await.len(), 1);
    assert!(
        inbox(&h, "u3").await.is_empty(),
        "u3 is bound to another route"
    );

    // A redelivery with the same id: duplicate, nothing delivered again.
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "d-1",
        &event("r1", "issue.opened"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (202, Some("duplicate")));
    assert_eq!(inbox(&h, "u1").await.len(), 1);
    // The same body under a new id is a new delivery.
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "d-2",
        &event("r1", "issue.opened"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (202, Some("accepted")));
    assert_eq!(inbox(&h, "u1").await.len(), 2);
    // A route nobody is bound to reaches nobody.
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "d-3",
        &event("nobody", "x"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["routedTo"].clone()), (202, json!([])));

    // Paging with cursors.
    let (_, p1) = h
        .op(Method::GET, "/api/v1/units/u1/messages?limit=1", None)
        .await;
    assert_eq!(p1["messages"].as_array().unwrap().len(), 1);
    let next = p1["next"].as_str().unwrap().to_string();
    let (_, p2) = h
        .op(
            Method::GET,
            &format!("/api/v1/units/u1/messages?after={next}&limit=1"),
            None,
        )
        .await;
    assert_eq!(p2["messages"][0]["deliveryId"], "d-2");
    let (_, p3) = h
        .op(
            Method::GET,
            &format!(
                "/api/v1/units/u1/messages?after={}",
                p2["next"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert!(p3["messages"].as_array().unwrap().is_empty());
    let (s, _) = h
        .op(Method::GET, "/api/v1/units/u1/messages?limit=501", None)
        .await;
    assert_eq!(s, 400);
    let (s, _) = h
        .op(Method::GET, "/api/v1/units/ghost/messages", None)
        .await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_binding_filters_drop_for_one_unit_only() {
    let h = webhook_host().await;
    h.bind(
        "u2",
        "hostile",
        json!({"routes": ["r1"], "reject_kinds": ["pr.closed"]}),
    )
    .await;
    let (_, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "f-1",
        &event("r1", "pr.closed"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(b["routedTo"], json!(["u1"]));
    assert!(inbox(&h, "u2").await.is_empty());
    // Re-binding with new routes moves the route: u2 no longer gets r9 … and gets r1 again.
    h.bind("u2", "hostile", json!({"routes": ["r7"]})).await;
    let (_, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "f-2",
        &event("r9", "x"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(b["routedTo"], json!([]));
    let (_, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "f-3",
        &event("r7", "x"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(b["routedTo"], json!(["u2"]));
    // Unbinding removes the route.
    h.op(Method::DELETE, "/api/v1/units/u2/connectors/hostile", None)
        .await;
    let (_, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "f-4",
        &event("r7", "x"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(b["routedTo"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_limits_and_headers() {
    let h = webhook_host().await;
    let body = event("r1", "k");
    let code = |b: &Value| b["error"]["code"].as_str().unwrap_or("").to_string();

    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "s-1",
        &body,
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        now_unix(),
    )
    .await;
    assert_eq!((s, code(&b).as_str()), (401, "invalid_signature"));
    let (s, _) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "s-2",
        &body,
        SECRET,
        now_unix() - 301,
    )
    .await;
    assert_eq!(s, 401, "stale timestamp");
    let (s, _) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "s-3",
        &body,
        SECRET,
        // Past the 300 s tolerance by a minute: at +301 a host reading its clock a second
        // later (a loaded machine) sees exactly 300 s and rightly accepts.
        now_unix() + 361,
    )
    .await;
    assert_eq!(s, 401, "future timestamp");

    // A correct signature over a body that was re-serialised after signing.
    let bytes = serde_json::to_vec(&body).unwrap();
    let ts = now_unix();
    let sig = standard_signature(SECRET, "s-4", ts, &bytes);
    let reserialised = serde_json::to_vec_pretty(&body).unwrap();
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/hostile"))
        .header("webhook-id", "s-4")
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", &sig)
        .body(reserialised)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Missing signature: 401; missing id: 400.
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/hostile"))
        .header("webhook-id", "s-5")
        .header("webhook-timestamp", ts.to_string())
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/hostile"))
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", &sig)
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // No such connector; a connector that takes no webhooks.
    let (s, b) = deliver(&h.client, &h.url, "nope", "s-6", &body, SECRET, now_unix()).await;
    assert_eq!((s, code(&b).as_str()), (404, "not_found"));
    let (s, _) = deliver(&h.client, &h.url, "acme", "s-7", &body, SECRET, now_unix()).await;
    assert_eq!(s, 404);

    // The body limit: exactly at the limit is read (and verified), one byte over is 413.
    let limit = 64 * 1024;
    for (len, expected) in [(limit, 202), (limit + 1, 413)] {
        let pad = "x".repeat(
            len - serde_json::to_vec(&json!({"messages": [], "pad": ""}))
                .unwrap()
                .len(),
        );
        let big = json!({"messages": [], "pad": pad});
        let raw = serde_json::to_vec(&big).unwrap();
        assert_eq!(raw.len(), len);
        let id = format!("big-{len}");
        let (s, b) = deliver(&h.client, &h.url, "hostile", &id, &big, SECRET, now_unix()).await;
        assert_eq!(s, expected, "{len} bytes: {b}");
        if expected == 413 {
            assert_eq!(code(&b), "payload_too_large");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_configured_fails_closed_and_rotation_works() {
    let h = TestHost::start().await;
    h.install(guests::HOSTILE).await;
    let (s, _) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "n-1",
        &event("r1", "k"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(s, 401);

    let old = "whsec_b2xkLXNlY3JldC1vbGQtc2VjcmV0LW9sZA==";
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into(), old.into()]
    })
    .await;
    h.install(guests::HOSTILE).await;
    let (s, _) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "n-2",
        &event("r1", "k"),
        old,
        now_unix(),
    )
    .await;
    assert_eq!(s, 202, "an older secret still in the list verifies");
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()]
    })
    .await;
    h.install(guests::HOSTILE).await;
    let (s, _) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "n-3",
        &event("r1", "k"),
        old,
        now_unix(),
    )
    .await;
    assert_eq!(s, 401, "a rotated-out secret no longer verifies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_dropped_mid_flight_does_not_block_the_next_one() {
    let h = webhook_host().await;
    // Stored failed: the slow translation succeeds, the inbox write fails.
    h.inject(Some(Fault::InboxWrite));
    let mut slow = event("r1", "k");
    slow["sleep_ms"] = json!(1000);
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "f-1",
        &slow,
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (202, Some("queued")), "{b}");
    let (_, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/f-1", None)
        .await;
    assert_eq!(d["status"], "failed", "{d}");
    h.inject(None);

    // A caller that gives up while the retry is translating (its future is dropped).
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        h.host.retry_delivery("hostile", "f-1"),
    )
    .await;
    assert!(dropped.is_err(), "the retry should still be running");

    // The next retry is not refused as "already being processed": the dropped one ran to
    // its end (and delivered), so this one finds the delivery done.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let outcome = h
        .host
        .retry_delivery("hostile", "f-1")
        .await
        .expect("the second retry succeeds");
    assert_eq!(outcome.status.as_str(), "duplicate");
    assert_eq!(inbox(&h, "u1").await.len(), 1);
    assert_eq!(inbox(&h, "u2").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_translation_is_kept_failed_and_retried() {
    let h = webhook_host().await;
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "t-1",
        &json!({"panic": true}),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (202, Some("queued")));
    let (s, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/t-1", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(d["status"], "failed");
    assert!(
        d["error"]
            .as_str()
            .unwrap()
            .contains("deliberate panic in translate-webhook"),
        "{d}"
    );
    assert_eq!(d["attempts"], 1);
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/webhooks/hostile/deliveries/t-1/retry",
            None,
        )
        .await;
    assert_eq!(
        (s, b["error"]["code"].as_str()),
        (502, Some("delivery_failed"))
    );
    let (_, d) = h
        .op(Method::GET, "/api/v1/webhooks/hostile/deliveries/t-1", None)
        .await;
    assert_eq!(d["attempts"], 2);

    // A delivery that fails for a reason that goes away: the inbox write fails.
    h.inject(Some(Fault::InboxWrite));
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "t-2",
        &event("r1", "k"),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!((s, b["status"].as_str()), (202, Some("queued")));
    assert!(
        inbox(&h, "u1").await.is_empty(),
        "a failed transaction leaves no message behind"
    );
    h.inject(None);
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/webhooks/hostile/deliveries/t-2/retry",
            None,
        )
        .await;
    assert_eq!((s, b["status"].as_str()), (200, Some("accepted")), "{b}");
    assert_eq!(inbox(&h, "u1").await.len(), 1);
    // Retrying a finished delivery delivers nothing again.
    let (s, b) = h
        .op(
            Method::POST,
            "/api/v1/webhooks/hostile/deliveries/t-2/retry",
            None,
        )
        .await;
    assert_eq!((s, b["status"].as_str()), (200, Some("duplicate")));
    assert_eq!(inbox(&h, "u1").await.len(), 1);
    let (s, _) = h
        .op(
            Method::GET,
            "/api/v1/webhooks/hostile/deliveries/nope",
            None,
        )
        .await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_routing_is_queued_and_finished_in_the_background() {
    let h = TestHost::start_with(|c| {
        c.connectors
            .entry("hostile".into())
            .or_default()
            .webhook_secrets = vec![SECRET.into()];
        c.limits.call_timeout = Duration::from_secs(10);
    })
    .await;
    h.install(guests::HOSTILE).await;
    h.unit("u1", None).await;
    h.bind("u1", "hostile", json!({"routes": ["r1"]})).await;
    // Routing takes 6 s, three times the 2 s the sender is kept waiting at most.
    let routing = Duration::from_millis(6000);
    let mut body = event("r1", "slow");
    body["sleep_ms"] = json!(routing.as_millis() as u64);
    let start = std::time::Instant::now();
    let (s, b) = deliver(
        &h.client,
        &h.url,
        "hostile",
        "q-1",
        &body,
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(
        (s, b["status"].as_str(), b["routedTo"].clone()),
        (202, Some("queued"), json!([]))
    );
    // Answered at the end of the inline window, not once routing is done: the bound is
    // halfway between the two, so a loaded machine does not fail it.
    let window = connector_host::webhooks::INLINE_ROUTING;
    assert!(
        start.elapsed() < (window + routing) / 2,
        "answered after {:?}",
        start.elapsed()
    );
    for _ in 0..150 {
        if inbox(&h, "u1").await.len() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the queued delivery was never finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_streams_over_sse_and_resumes_from_last_event_id() {
    let h = webhook_host().await;
    deliver(
        &h.client,
        &h.url,
        "hostile",
        "e-1",
        &event("r1", "first"),
        SECRET,
        now_unix(),
    )
    .await;
    let open = |last: Option<String>| {
        let mut req = h
            .client
            .get(h.at("/api/v1/units/u1/messages/stream"))
            .bearer_auth(OPERATOR_TOKEN);
        if let Some(id) = last {
            req = req.header("last-event-id", id);
        }
        req.send()
    };
    let resp = open(None).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    let read_events = |text: &str| -> Vec<(String, Value)> {
        text.split("\n\n")
            .filter_map(|block| {
                let id = block
                    .lines()
                    .find_map(|l| l.strip_prefix("id:"))?
                    .trim()
                    .to_string();
                let data = block
                    .lines()
                    .find_map(|l| l.strip_prefix("data:"))?
                    .trim()
                    .to_string();
                Some((id, serde_json::from_str(&data).ok()?))
            })
            .collect()
    };
    // The stored backlog first, then a live one.
    let mut sent_second = false;
    let events = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let chunk = stream.next().await.expect("stream open").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
            let events = read_events(&text);
            if events.len() == 1 && !sent_second {
                sent_second = true;
                deliver(
                    &h.client,
                    &h.url,
                    "hostile",
                    "e-2",
                    &event("r1", "second"),
                    SECRET,
                    now_unix(),
                )
                .await;
            }
            if events.len() >= 2 {
                return events;
            }
        }
    })
    .await
    .expect("two events within 10 s");
    assert_eq!(events[0].1["kind"], "first");
    assert_eq!(events[1].1["kind"], "second");
    drop(stream);

    // Resume after the first event: only the second comes back.
    let resp = open(Some(events[0].0.clone())).await.unwrap();
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    let resumed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let chunk = stream.next().await.expect("stream open").expect("chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
            let events = read_events(&text);
            if !events.is_empty() {
                return events;
            }
        }
    })
    .await
    .expect("an event within 10 s");
    assert_eq!(resumed[0].1["kind"], "second");
    assert_eq!(resumed[0].0, events[1].0);

    // The same subscription through the Rust API.
    let mut sub = Box::pin(h.host.subscribe("u1", None).unwrap());
    let first = tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.kind, "first");
}

/// Kill -9 the server while deliveries are in flight; after a restart every acknowledged
/// delivery's messages exist exactly once, and redeliveries add nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_dash_nine_between_acceptance_and_delivery_loses_nothing_and_duplicates_nothing() {
    for round in 0..3 {
        kill_round(round).await;
    }
}

async fn kill_round(round: usize) {
    let data = tempfile::tempdir().unwrap();
    let connectors = data.path().join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm")).unwrap();
    let env = [
        ("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET),
        (
            "CONNECTOR_HOST_CONNECTORS_DIR",
            connectors.to_str().unwrap(),
        ),
    ];
    let mut server = ServerProcess::start(data.path(), &env).await;
    let client = reqwest::Client::new();
    let op = |method: Method, url: String, body: Value| {
        client
            .request(method, url)
            .bearer_auth(OPERATOR_TOKEN)
            .json(&body)
            .send()
    };
    for u in ["k1", "k2"] {
        assert!(op(
            Method::PUT,
            format!("{}/api/v1/units/{u}", server.url),
            json!({})
        )
        .await
        .unwrap()
        .status()
        .is_success());
        let r = op(
            Method::PUT,
            format!("{}/api/v1/units/{u}/connectors/hostile", server.url),
            json!({"config": {"routes": ["r"]}}),
        )
        .await
        .unwrap();
        assert!(r.status().is_success());
    }

    // Six fast deliveries, and six slow ones whose translation outlasts the 2 s inline
    // routing window: those are answered `queued` (accepted, stored) and are still being
    // translated when the process is killed.
    let body_of = |i: usize| {
        let mut body = event("r", "kill.test");
        body["sleep_ms"] = json!(if i.is_multiple_of(2) { 0 } else { 3000 });
        body
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..12 {
        let client = client.clone();
        let url = server.url.clone();
        let body = body_of(i);
        let tx = tx.clone();
        tokio::spawn(async move {
            let id = format!("k{round}-{i}");
            let answer =
                try_deliver(&client, &url, "hostile", &id, &body, SECRET, now_unix()).await;
            let _ = tx.send((id, answer));
        });
    }
    drop(tx);
    // Kill the moment the first slow delivery is acknowledged as `queued`: it is stored,
    // answered, and its translation is still running.
    let mut answers = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Ok(Some(answer)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        let queued = matches!(&answer.1, Some((202, b)) if b["status"] == "queued");
        answers.push(answer);
        if queued {
            break;
        }
    }
    server.kill9();
    while let Some(answer) = rx.recv().await {
        answers.push(answer);
    }
    let mut acknowledged = Vec::new();
    let mut queued = 0;
    for (id, answer) in answers {
        if let Some((202, b)) = answer {
            match b["status"].as_str() {
                Some("accepted") => {}
                Some("queued") => queued += 1,
                other => panic!("unexpected status {other:?}: {b}"),
            }
            acknowledged.push(id);
        }
    }
    assert!(
        queued > 0,
        "round {round}: no delivery was accepted-but-unrouted when the process was killed"
    );

    let server = ServerProcess::start(data.path(), &env).await;
    let count = |unit: &'static str| {
        let client = client.clone();
        let url = server.url.clone();
        async move {
            let r = client
                .get(format!("{url}/api/v1/units/{unit}/messages?limit=500"))
                .bearer_auth(OPERATOR_TOKEN)
                .send()
                .await
                .unwrap();
            let b: Value = r.json().await.unwrap();
            b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["deliveryId"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    // Wait for the background finishing of left-over deliveries.
    for _ in 0..300 {
        let seen = count("k1").await;
        if acknowledged.iter().all(|id| seen.contains(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for unit in ["k1", "k2"] {
        let ids = count(unit).await;
        assert_each_once(&ids, &acknowledged, &format!("round {round}, {unit}"));
    }
    // Redeliver everything (GitHub retries): nothing doubles.
    for i in 0..12 {
        let id = format!("k{round}-{i}");
        let (s, _) = deliver(
            &client,
            &server.url,
            "hostile",
            &id,
            &body_of(i),
            SECRET,
            now_unix(),
        )
        .await;
        assert_eq!(s, 202);
    }
    // Left-over deliveries finish in the background, one after the other; on a loaded
    // machine that takes a while, so wait generously (the assertions below are exact).
    for _ in 0..600 {
        let (a, b) = (count("k1").await, count("k2").await);
        if a.len() >= 12 && b.len() >= 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut statuses = Vec::new();
    for i in 0..12 {
        let r = client
            .get(format!(
                "{}/api/v1/webhooks/hostile/deliveries/k{round}-{i}",
                server.url
            ))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .unwrap();
        statuses.push(r.text().await.unwrap_or_default());
    }
    for unit in ["k1", "k2"] {
        let ids = count(unit).await;
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ids.len(),
            "round {round}: duplicates after redelivery in {unit}"
        );
        if ids.len() != 12 {
            eprintln!("round {round}: delivery statuses: {statuses:#?}");
        }
        assert_eq!(
            ids.len(),
            12,
            "round {round}: every delivery exactly once in {unit}: {ids:?}"
        );
    }
}

/// Deliveries stored together (one commit) are published to live subscribers in no
/// particular order: a live stream still gets every message once, in cursor order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_inbox_stream_misses_nothing_when_deliveries_commit_together() {
    let _load = integration_tests::harness::machine_load().await;
    const DELIVERIES: usize = 300;
    let h = webhook_host().await;
    let mut live = Box::pin(h.host.subscribe("u1", None).expect("subscribe"));
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..32 {
        let (client, url, next) = (h.client.clone(), h.url.clone(), next.clone());
        senders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= DELIVERIES {
                    return;
                }
                let id = format!("s-{i}");
                let (s, b) = deliver(
                    &client,
                    &url,
                    "hostile",
                    &id,
                    &event("r1", "s"),
                    SECRET,
                    now_unix(),
                )
                .await;
                assert_eq!(s, 202, "{id}: {b}");
            }
        }));
    }
    for s in senders {
        s.await.expect("sender");
    }
    let stored = inbox_ids(&h.client, &h.url, "u1").await;
    assert_eq!(stored.len(), DELIVERIES);
    let mut streamed = Vec::new();
    while streamed.len() < DELIVERIES {
        match tokio::time::timeout(Duration::from_secs(10), live.next()).await {
            Ok(Some(m)) => streamed.push(m.delivery_id),
            _ => break,
        }
    }
    assert_eq!(
        streamed.len(),
        DELIVERIES,
        "the live stream skipped {} of {DELIVERIES} stored messages",
        DELIVERIES - streamed.len()
    );
    assert_eq!(streamed, stored, "the live stream is not in cursor order");
}

/// Every `acknowledged` delivery id is in `ids` (a unit's inbox) exactly once, and no id
/// is there twice.
fn assert_each_once(ids: &[String], acknowledged: &[String], context: &str) {
    for id in acknowledged {
        assert_eq!(
            ids.iter().filter(|x| *x == id).count(),
            1,
            "{context}: acknowledged {id} not exactly once: {ids:?}"
        );
    }
    let mut unique = ids.to_vec();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "{context}: duplicates: {ids:?}");
}

/// Every delivery id in a unit's inbox, in cursor order (all pages).
async fn inbox_ids(client: &reqwest::Client, base: &str, unit: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = String::new();
    loop {
        let page: Value = client
            .get(format!(
                "{base}/api/v1/units/{unit}/messages?limit=500&after={after}"
            ))
            .bearer_auth(OPERATOR_TOKEN)
            .send()
            .await
            .expect("inbox page")
            .json()
            .await
            .expect("inbox json");
        let messages = page["messages"].as_array().expect("messages");
        if messages.is_empty() {
            return ids;
        }
        ids.extend(
            messages
                .iter()
                .map(|m| m["deliveryId"].as_str().expect("deliveryId").to_string()),
        );
        after = page["next"].as_str().expect("next").to_string();
    }
}

/// A metric's value from `/metrics`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Many deliveries at once share commits; a kill -9 while groups are being committed
/// loses no acknowledged delivery and doubles none, and redeliveries fill in the rest
/// exactly once. SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_the_middle_of_a_commit_group_loses_nothing_and_doubles_nothing() {
    kill_in_a_group(None).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_the_middle_of_a_postgres_commit_group_loses_nothing_and_doubles_nothing() {
    let Some(pg) = integration_tests::postgres::require_postgres() else {
        return;
    };
    let url = pg.create_database("kill_in_a_group").unwrap();
    kill_in_a_group(Some(&url)).await;
}

async fn kill_in_a_group(database_url: Option<&str>) {
    let _load = integration_tests::harness::machine_load().await;
    const DELIVERIES: usize = 400;
    const SENDERS: usize = 48;
    let data = tempfile::tempdir().unwrap();
    let connectors = data.path().join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm")).unwrap();
    let mut env = vec![
        ("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET),
        (
            "CONNECTOR_HOST_CONNECTORS_DIR",
            connectors.to_str().unwrap(),
        ),
    ];
    if let Some(url) = database_url {
        env.push(("CONNECTOR_HOST_DATABASE_URL", url));
    }
    let mut server = ServerProcess::start(data.path(), &env).await;
    let client = reqwest::Client::new();
    for u in ["g1", "g2"] {
        for (path, body) in [
            (format!("/api/v1/units/{u}"), json!({})),
            (
                format!("/api/v1/units/{u}/connectors/hostile"),
                json!({"config": {"routes": ["r"]}}),
            ),
        ] {
            let r = client
                .put(format!("{}{path}", server.url))
                .bearer_auth(OPERATOR_TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{path}: {}", r.status());
        }
    }

    // Senders work through the ids in parallel; acknowledgements are counted as they come.
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..SENDERS {
        let (client, url, next, tx) =
            (client.clone(), server.url.clone(), next.clone(), tx.clone());
        tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= DELIVERIES {
                    return;
                }
                let id = format!("g-{i}");
                let answer = try_deliver(
                    &client,
                    &url,
                    "hostile",
                    &id,
                    &event("r", "g"),
                    SECRET,
                    now_unix(),
                )
                .await;
                if tx.send((id, answer)).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut answers = Vec::new();
    while let Some(answer) = rx.recv().await {
        answers.push(answer);
        if answers.len() == DELIVERIES / 4 {
            break;
        }
    }
    // Groups are forming: more writes than commits so far.
    let metrics = client
        .get(format!("{}/metrics", server.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    server.kill9();
    let (commits, writes) = (
        metric(&metrics, "connector_host_store_commits_total"),
        metric(&metrics, "connector_host_store_writes_total"),
    );
    assert!(
        writes > commits,
        "no commit held more than one write: {commits} commits, {writes} writes"
    );
    while let Some(answer) = rx.recv().await {
        answers.push(answer);
    }
    let mut acknowledged = Vec::new();
    for (id, answer) in &answers {
        if let Some((202, b)) = answer {
            // `queued` (routing outlasted the inline window on a loaded machine) is an
            // acknowledgement too: stored, finished after the restart.
            assert!(
                b["status"] == "accepted" || b["status"] == "queued",
                "{id}: {b}"
            );
            acknowledged.push(id.clone());
        }
    }
    let unanswered = DELIVERIES - acknowledged.len();
    assert!(
        acknowledged.len() >= DELIVERIES / 4 && unanswered > 0,
        "the kill came too late to catch deliveries in flight: {} acknowledged",
        acknowledged.len()
    );

    let server = ServerProcess::start(data.path(), &env).await;
    // Queued ones are finished in the background after the start.
    for _ in 0..300 {
        let seen = inbox_ids(&client, &server.url, "g2").await;
        if acknowledged.iter().all(|id| seen.contains(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for unit in ["g1", "g2"] {
        let ids = inbox_ids(&client, &server.url, unit).await;
        assert_each_once(&ids, &acknowledged, unit);
    }
    // The sender retries everything it has no acknowledgement for (and, to be sure,
    // everything else too): each delivery ends up exactly once in every unit.
    let mut statuses = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..DELIVERIES {
        let id = format!("g-{i}");
        let (s, b) = deliver(
            &client,
            &server.url,
            "hostile",
            &id,
            &event("r", "g"),
            SECRET,
            now_unix(),
        )
        .await;
        assert_eq!(s, 202, "{id}: {b}");
        let status = b["status"].as_str().unwrap_or_default().to_string();
        if acknowledged.contains(&id) {
            assert_eq!(status, "duplicate", "{id} was acknowledged before the kill");
        }
        *statuses.entry(status).or_default() += 1;
    }
    for unit in ["g1", "g2"] {
        let ids = inbox_ids(&client, &server.url, unit).await;
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(
            unique.len(),
            ids.len(),
            "duplicates after redelivery in {unit}"
        );
        assert_eq!(
            ids.len(),
            DELIVERIES,
            "every delivery exactly once in {unit} ({statuses:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_sent_with_a_webhook_are_never_stored_or_shown_to_the_guest() {
    let h = webhook_host().await;
    let body = serde_json::to_vec(&event("r1", "k")).expect("json");
    let ts = now_unix();
    let signature = standard_signature(SECRET, "hdr-1", ts, &body);
    let r = h
        .client
        .post(h.at("/api/v1/webhooks/hostile"))
        .header("content-type", "application/json")
        .header("webhook-id", "hdr-1")
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature)
        .header("authorization", "Bearer platform-secret")
        .header("cookie", "session=s3cret")
        .header("proxy-authorization", "Basic cHJveHk=")
        .header("x-api-key", "key-123")
        .header("x-auth-token", "tok-456")
        .header("x-forwarded-for", "10.0.0.1")
        .header("x-request-id", "req-789")
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status(), 202);
    let stored = h
        .database()
        .delivery("hostile", "hdr-1")
        .await
        .expect("store")
        .expect("stored");
    let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
    for secret in [
        "platform-secret",
        "s3cret",
        "cHJveHk=",
        "key-123",
        "tok-456",
        "10.0.0.1",
    ] {
        assert!(
            !stored.headers.iter().any(|(_, v)| v.contains(secret)),
            "{secret} was stored: {names:?}"
        );
    }
    for kept in [
        "content-type",
        "webhook-id",
        "webhook-signature",
        "x-request-id",
    ] {
        assert!(names.contains(&kept), "{kept} missing: {names:?}");
    }
}

/// A guest's refusal text is logged by the host when a delivery fails; a newline in it
/// cannot forge a host log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guests_refusal_cannot_forge_a_host_log_line() {
    let data = tempfile::tempdir().expect("temp dir");
    let log_path = data.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut server = ServerProcess::start_logging_to(
        data.path(),
        &[("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET)],
        log,
    )
    .await;
    let client = reqwest::Client::new();
    let op = |method: Method, path: &str, body: Value| {
        let client = client.clone();
        let url = format!("{}{path}", server.url);
        async move {
            integration_tests::harness::send(
                &client,
                method,
                &url,
                Some(OPERATOR_TOKEN),
                Some(body),
            )
            .await
        }
    };
    let (s, b) = integration_tests::harness::upload_component(
        &client,
        &server.url,
        std::fs::read(guests::HOSTILE).expect("component"),
        "",
    )
    .await;
    assert!(s == 201 || s == 200, "{s} {b}");
    let (s, b) = op(Method::PUT, "/api/v1/units/u1", json!({})).await;
    assert!(s == 201 || s == 200, "{s} {b}");
    let (s, b) = op(
        Method::PUT,
        "/api/v1/units/u1/connectors/hostile",
        json!({"config": {"routes": ["r1"]}}),
    )
    .await;
    assert!(s == 201 || s == 200, "{s} {b}");
    let forged =
        "2026-01-01T00:00:00.000000Z ERROR connector_host::auth: FORGED operator token accepted";
    let (s, b) = deliver(
        &client,
        &server.url,
        "hostile",
        "forge-1",
        &json!({"refuse": format!("harmless\n{forged}\r\n\u{1b}[2Jcleared")}),
        SECRET,
        now_unix(),
    )
    .await;
    assert_eq!(s, 202, "{b}");
    server.kill9();
    let log = std::fs::read_to_string(&log_path).expect("log");
    assert!(log.contains("harmless"), "the refusal is logged: {log}");
    for line in log.lines() {
        assert!(!line.starts_with(forged), "a forged line: {line:?}");
        assert!(!line.contains('\u{1b}'), "a raw escape sequence: {line:?}");
    }
}
