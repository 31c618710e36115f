//! `GET /api/v1/units` and `GET /api/v1/agents` (CONTRACT §3): summaries, filters,
//! cursors that walk every entry once, and the limit's bounds.

use integration_tests::harness::{error_code as code, TestHost};
use reqwest::Method;
use serde_json::{json, Value};

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|e| e["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Walks a list page by page with `limit`, returning every id in order.
async fn walk(h: &TestHost, path: &str, key: &str, limit: u32) -> Vec<String> {
    let sep = if path.contains('?') { '&' } else { '?' };
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..100 {
        let url = match &after {
            Some(a) => format!("{path}{sep}limit={limit}&after={a}"),
            None => format!("{path}{sep}limit={limit}"),
        };
        let (s, b) = h.op(Method::GET, &url, None).await;
        assert_eq!(s, 200, "{url}: {b}");
        let page = ids(&b[key]);
        assert!(page.len() <= limit as usize, "{url}: {b}");
        all.extend(page);
        match b["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => {
                assert!(b["next"].is_null(), "{b}");
                return all;
            }
        }
    }
    panic!("{path} never ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_list_with_summaries_filters_and_cursors() {
    let h = TestHost::start().await;
    h.unit("eng", None).await;
    h.unit("eng-backend", Some("eng")).await;
    h.unit("eng-web", Some("eng")).await;
    h.unit("ops", None).await;
    h.agent("ada", &["eng-backend", "eng"]).await;
    h.agent("bob", &["eng"]).await;
    h.bind("eng", "acme", json!({})).await;
    let (s, b) = h
        .op(
            Method::PUT,
            "/api/v1/units/eng/connectors/arxiv",
            Some(json!({"config": {}})),
        )
        .await;
    assert!(s == 201 || s == 200, "{b}");

    let (s, b) = h.op(Method::GET, "/api/v1/units", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(ids(&b["units"]), ["eng", "eng-backend", "eng-web", "ops"]);
    assert!(b["next"].is_null(), "{b}");
    assert_eq!(
        b["units"][0],
        json!({"id": "eng", "parent": null, "displayName": null,
               "bindings": ["acme", "arxiv"], "agents": 2})
    );
    assert_eq!(
        b["units"][1],
        json!({"id": "eng-backend", "parent": "eng", "displayName": null,
               "bindings": [], "agents": 1})
    );

    // `parent=` empty: roots; `parent=eng`: its children; an unknown parent: 404.
    let (_, b) = h.op(Method::GET, "/api/v1/units?parent=", None).await;
    assert_eq!(ids(&b["units"]), ["eng", "ops"]);
    let (_, b) = h.op(Method::GET, "/api/v1/units?parent=eng", None).await;
    assert_eq!(ids(&b["units"]), ["eng-backend", "eng-web"]);
    let (s, b) = h.op(Method::GET, "/api/v1/units?parent=nope", None).await;
    assert_eq!((s, code(&b)), (404, "not_found"), "{b}");

    // Pages of one and of three walk every unit once, in order.
    for limit in [1, 3] {
        assert_eq!(
            walk(&h, "/api/v1/units", "units", limit).await,
            ["eng", "eng-backend", "eng-web", "ops"]
        );
    }
    let (_, b) = h.op(Method::GET, "/api/v1/units?limit=2", None).await;
    assert_eq!(b["next"], "eng-backend", "{b}");
    // A unit added behind the cursor is not shown again; one ahead of it is.
    h.unit("aaa", None).await;
    h.unit("fin", None).await;
    let (_, b) = h
        .op(Method::GET, "/api/v1/units?after=eng-backend", None)
        .await;
    assert_eq!(ids(&b["units"]), ["eng-web", "fin", "ops"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_list_by_unit_with_cursors() {
    let h = TestHost::start().await;
    h.unit("eng", None).await;
    h.unit("ops", None).await;
    for (id, units) in [
        ("ada", &["eng"][..]),
        ("bob", &["ops", "eng"][..]),
        ("cy", &["ops"][..]),
    ] {
        h.agent(id, units).await;
    }
    let (s, b) = h.op(Method::GET, "/api/v1/agents", None).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"agents": [
            {"id": "ada", "units": ["eng"], "displayName": null},
            {"id": "bob", "units": ["ops", "eng"], "displayName": null},
            {"id": "cy", "units": ["ops"], "displayName": null},
        ], "next": null})
    );
    let (_, b) = h.op(Method::GET, "/api/v1/agents?unit=eng", None).await;
    assert_eq!(ids(&b["agents"]), ["ada", "bob"]);
    assert_eq!(
        walk(&h, "/api/v1/agents?unit=ops", "agents", 1).await,
        ["bob", "cy"]
    );
    assert_eq!(
        walk(&h, "/api/v1/agents", "agents", 2).await,
        ["ada", "bob", "cy"]
    );
    let (s, b) = h.op(Method::GET, "/api/v1/agents?unit=nope", None).await;
    assert_eq!((s, code(&b)), (404, "not_found"), "{b}");
    // A deleted agent leaves the list.
    let (s, _) = h.op(Method::DELETE, "/api/v1/agents/bob", None).await;
    assert_eq!(s, 204);
    let (_, b) = h.op(Method::GET, "/api/v1/agents?unit=eng", None).await;
    assert_eq!(ids(&b["agents"]), ["ada"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_bounds_and_authentication() {
    let h = TestHost::start().await;
    h.unit("eng", None).await;
    for path in ["/api/v1/units", "/api/v1/agents"] {
        for bad in [
            "limit=0",
            "limit=501",
            "limit=ten",
            "limit=-1",
            "after=%20x",
            "what=1",
        ] {
            let url = format!("{path}?{bad}");
            let (s, b) = h.op(Method::GET, &url, None).await;
            assert_eq!((s, code(&b)), (400, "invalid_request"), "{url}: {b}");
            let message = b["error"]["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "{url}: {b}");
            if bad.starts_with("limit") {
                assert!(message.contains("between 1 and 500"), "{url}: {b}");
            }
        }
        let (s, b) = h.op(Method::GET, &format!("{path}?limit=500"), None).await;
        assert_eq!(s, 200, "{b}");
        let (s, b) = h.as_token("wrong", Method::GET, path, None).await;
        assert_eq!((s, code(&b)), (401, "unauthenticated"), "{b}");
    }
    let agent_token = {
        h.agent("ada", &["eng"]).await;
        h.agent_token("ada").await
    };
    let (s, _) = h
        .as_token(&agent_token, Method::GET, "/api/v1/agents", None)
        .await;
    assert_eq!(s, 401, "an agent token does not list agents");
}
