//! Traces (CONTRACT §11), from the outside: a `connector-host serve` exporting to an
//! OTLP/HTTP receiver on 127.0.0.1 that decodes what it is sent with the official protobuf
//! definitions (`opentelemetry-proto`). One MCP `tools/call` whose guest makes an outbound
//! request to a local server is one trace: the caller's span (its `traceparent` in
//! `_meta`) → the MCP message → the tool call → the guest's instantiation and call → the
//! guest's outbound request, whose `traceparent` the local server sees. A REST call takes
//! its parent from the `traceparent` header, a webhook's receipt, routing and inbox append
//! are spans too, and audit records carry the trace id. A collector that is down does not
//! slow calls; the spans it cannot take are counted in `/metrics`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use integration_tests::guests;
use integration_tests::harness::{
    machine_load, send, upload_component, ServerProcess, OPERATOR_TOKEN,
};
use integration_tests::otlp::{Receiver, Span};
use reqwest::Method;
use serde_json::{json, Value};

/// The one span of `spans` named `name`.
fn named<'s>(spans: &'s [Span], name: &str) -> &'s Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one `{name}` span expected: {spans:#?}");
    found[0]
}

fn assert_child(child: &Span, parent: &Span) {
    assert_eq!(
        (&child.trace_id, &child.parent_span_id),
        (&parent.trace_id, &parent.span_id),
        "`{}` should be a child of `{}`",
        child.name,
        parent.name
    );
}

/// A server on 127.0.0.1 the conformance guest's `test_trigger_tool_change` posts to; it
/// keeps the `traceparent` of each request.
async fn trigger_server() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let kept = kept.clone();
        async move {
            kept.lock().unwrap().push(
                headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            );
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/trigger", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const CONFIG: &str = "[connectors.conformance]\nallow_private_networks = true\n\n[connectors.hostile]\nwebhook_secrets = [\"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]\n";

/// A served host with the conformance and acme connectors bound to unit `team`, agent
/// `ada` in it; returns the server, a client and ada's token.
async fn served(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    trigger: &str,
) -> (ServerProcess, reqwest::Client, String) {
    let server = ServerProcess::start_with_config(dir, env, CONFIG).await;
    let client = reqwest::Client::new();
    let base = server.url.clone();
    for component in [guests::CONFORMANCE, guests::HOSTILE] {
        let (s, b) = upload_component(&client, &base, std::fs::read(component).unwrap(), "").await;
        assert_eq!(s, 201, "{b}");
    }
    let op = |method: Method, path: &str, body: Option<Value>| {
        let client = client.clone();
        let url = format!("{base}/api/v1{path}");
        async move { send(&client, method, &url, Some(OPERATOR_TOKEN), body).await }
    };
    let (s, b) = op(Method::PUT, "/units/team", Some(json!({}))).await;
    assert!(s == 200 || s == 201, "{s} {b}");
    let (s, b) = op(Method::PUT, "/agents/ada", Some(json!({"units": ["team"]}))).await;
    assert!(s == 200 || s == 201, "{s} {b}");
    for (slug, config) in [
        ("conformance", json!({"triggerUrl": trigger})),
        ("acme", json!({})),
        ("hostile", json!({"routes": ["r1"]})),
    ] {
        let (s, b) = op(
            Method::PUT,
            &format!("/units/team/connectors/{slug}"),
            Some(json!({"config": config})),
        )
        .await;
        assert!(s == 200 || s == 201, "{s} {b}");
    }
    let (s, b) = op(Method::POST, "/agents/ada/tokens", Some(json!({}))).await;
    assert_eq!(s, 201, "{b}");
    let token = b["token"].as_str().expect("token").to_string();
    (server, client, token)
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mcp_tool_call_is_one_trace_down_to_the_guests_outbound_request() {
    let receiver = Receiver::start().await;
    let (trigger, seen) = trigger_server().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let (server, client, token) = served(dir.path(), &env, &trigger).await;
    let endpoint = format!("{}/mcp/agents/ada", server.url);

    // A stateless 2026-07-28 `tools/call` whose `_meta` carries the caller's trace.
    let name = "conformance.test_trigger_tool_change";
    let answer: Value = client
        .post(&endpoint)
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {
                "name": name, "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "0"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "traceparent": format!("00-{TRACE}-{CALLER_SPAN}-01"),
                    "tracestate": "tests=1",
                }
            }
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    let spans = receiver
        .trace(
            TRACE,
            &[
                "MCP tools/call",
                "tool call",
                "guest instantiate",
                "guest call",
                "guest HTTP request",
            ],
        )
        .await;
    let message = named(&spans, "MCP tools/call");
    assert_eq!(message.parent_span_id, CALLER_SPAN, "{spans:#?}");
    assert_eq!(message.service, "connector-host");
    let call = named(&spans, "tool call");
    assert_child(call, message);
    assert_eq!(call.attributes["tool"], name);
    assert_eq!(call.attributes["agent"], "ada");
    assert_eq!(call.attributes["connector"], "conformance");
    assert!(call.attributes["digest"].starts_with("sha256:"), "{call:?}");
    assert_eq!(call.attributes["outcome"], "ok");
    let instantiate = named(&spans, "guest instantiate");
    assert_child(instantiate, call);
    let guest = named(&spans, "guest call");
    assert_child(guest, call);
    let outbound = named(&spans, "guest HTTP request");
    assert_child(outbound, guest);
    // Only the message's parent (the caller's span) is in another process.
    assert_eq!(message.parent_is_remote, Some(true), "{message:?}");
    for span in [call, instantiate, guest, outbound] {
        assert_eq!(span.parent_is_remote, Some(false), "{span:?}");
    }
    assert_eq!(outbound.attributes["http.request.method"], "POST");
    assert_eq!(outbound.attributes["http.response.status_code"], "200");

    // The local server saw the outbound span as its parent, in the caller's trace.
    let traceparents = seen.lock().unwrap().clone();
    assert_eq!(
        traceparents,
        [Some(format!("00-{TRACE}-{}-01", outbound.span_id))]
    );

    // The call's audit record carries the trace id.
    let (s, page) = send(
        &client,
        Method::GET,
        &format!("{}/api/v1/audit?action=tool.call", server.url),
        Some(OPERATOR_TOKEN),
        None,
    )
    .await;
    assert_eq!(s, 200, "{page}");
    assert_eq!(page["records"][0]["traceId"], TRACE, "{page}");

    // A REST call takes its parent from the `traceparent` header.
    let rest_trace = "0af7651916cd43dd8448eb211c80319c";
    let rest_caller = "b7ad6b7169203331";
    let r = client
        .post(format!("{}/api/v1/agents/ada/tool-calls", server.url))
        .bearer_auth(&token)
        .header("traceparent", format!("00-{rest_trace}-{rest_caller}-01"))
        .json(&json!({"tool": "acme.echo", "arguments": {"message": "hi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let spans = receiver
        .trace(rest_trace, &["POST", "tool call", "guest call"])
        .await;
    let request = spans
        .iter()
        .find(|s| s.parent_span_id == rest_caller)
        .unwrap_or_else(|| panic!("no span is the caller's child: {spans:#?}"));
    assert_eq!(request.name, "POST");
    assert_eq!(
        request.attributes["http.route"],
        "/api/v1/agents/{agent}/tool-calls"
    );
    assert_eq!(
        request.attributes["url.path"],
        "/api/v1/agents/ada/tool-calls"
    );
    assert_eq!(request.attributes["http.response.status_code"], "200");
    let call = named(&spans, "tool call");
    assert_child(call, request);
    assert_eq!(call.attributes["tool"], "acme.echo");

    // A webhook: its receipt, routing and inbox append, in the sender's trace.
    let hook_trace = "1af7651916cd43dd8448eb211c80319d";
    let hook_caller = "c7ad6b7169203332";
    let body = serde_json::to_vec(&json!({"messages": [{"route": "r1", "kind": "note",
        "payload": {"text": "hello"}}]}))
    .unwrap();
    let now = integration_tests::harness::now_unix();
    let signature =
        connector_host::webhooks::verify::standard_signature(SECRET, "d-traced", now, &body);
    let r = client
        .post(format!("{}/api/v1/webhooks/hostile", server.url))
        .header("content-type", "application/json")
        .header("webhook-id", "d-traced")
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", signature)
        .header("traceparent", format!("00-{hook_trace}-{hook_caller}-01"))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let b: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(
        (status, b["status"].as_str()),
        (202, Some("accepted")),
        "{b}"
    );
    let spans = receiver
        .trace(
            hook_trace,
            &[
                "webhook receive",
                "webhook route",
                "inbox append",
                "guest call",
            ],
        )
        .await;
    let receipt = named(&spans, "webhook receive");
    assert_eq!(receipt.attributes["connector"], "hostile");
    let routing = named(&spans, "webhook route");
    assert_child(routing, receipt);
    let append = named(&spans, "inbox append");
    assert_child(append, receipt);
    let mut exports: Vec<&str> = spans
        .iter()
        .filter(|s| s.name == "guest call")
        .map(|s| {
            assert_child(s, routing);
            s.attributes["export"].as_str()
        })
        .collect();
    exports.sort();
    assert_eq!(exports, ["accepts-message", "translate-webhook"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_does_not_answer_neither_slows_calls_nor_goes_uncounted() {
    // A collector that takes connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let (trigger, _) = trigger_server().await;
    let plain_dir = tempfile::tempdir().unwrap();
    let traced_dir = tempfile::tempdir().unwrap();
    let (plain, client, plain_token) = served(plain_dir.path(), &[], &trigger).await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", silent_url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
    ];
    let (traced, _, traced_token) = served(traced_dir.path(), &env, &trigger).await;

    let _load = machine_load().await;
    let call = |base: String, token: String| {
        let client = client.clone();
        async move {
            let started = Instant::now();
            let r = client
                .post(format!("{base}/api/v1/agents/ada/tool-calls"))
                .bearer_auth(token)
                .json(&json!({"tool": "acme.echo", "arguments": {"message": "hi"}}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            started.elapsed()
        }
    };
    // Warm both, then alternate so both see the same machine.
    for _ in 0..20 {
        call(plain.url.clone(), plain_token.clone()).await;
        call(traced.url.clone(), traced_token.clone()).await;
    }
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        without.push(call(plain.url.clone(), plain_token.clone()).await);
        with.push(call(traced.url.clone(), traced_token.clone()).await);
    }
    without.sort();
    with.sort();
    let (p50_without, p50_with) = (without[150], with[150]);
    assert!(
        p50_with <= p50_without * 3 / 2 + Duration::from_millis(1),
        "tool calls slowed by a silent collector: p50 {p50_with:?} against {p50_without:?} without export"
    );

    let (_, metrics) = {
        let r = client
            .get(format!("{}/metrics", traced.url))
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    };
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("connector_host_trace_spans_dropped_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no dropped-spans counter: {metrics}"));
    assert!(
        dropped > 0,
        "640+ calls' spans cannot fit a queue of 64 that never empties: {metrics}"
    );
    held.abort();
}
