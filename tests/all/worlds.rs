//! The three WIT worlds side by side, and rich tool results (CONTRACT.md §5, §6):
//! components built against `spring:connector@0.1.0` and `@0.2.0` (kept fixtures) keep
//! working beside 0.3.0 components; tools return content blocks and structured output
//! checked against their output schema, through the HTTP API and both MCP eras, in the
//! 0.2.0 world as in 0.3.0.

use std::path::PathBuf;

use integration_tests::guests;
use integration_tests::harness::{error_code, upload_component, TestHost};
use reqwest::Method;
use serde_json::{json, Value};

use crate::mcp::Mcp;
use crate::mcp_stateless::Stateless;

const FIRST: &str = "spring:connector@0.1.0";
const SECOND: &str = "spring:connector@0.2.0";
const CURRENT: &str = "spring:connector@0.3.0";
/// `rich`'s PNG and WAV (tests/guests/rich), base64.
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC";
const WAV_B64: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

/// The kept build of `name` in `world` (`FIRST` or `SECOND`).
fn built_in(world: &str, name: &str) -> Vec<u8> {
    let version = world.rsplit('@').next().unwrap_or_default();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("fixtures/spring-connector-{version}"))
        .join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn first_world(name: &str) -> Vec<u8> {
    built_in(FIRST, name)
}

/// A host with `rich` installed, both `acme` and `rich` bound on unit `team`, agent `ada`.
async fn setup() -> TestHost {
    let h = TestHost::start().await;
    let rich = h.install(guests::RICH).await;
    assert_eq!(rich["world"], CURRENT, "{rich}");
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "acme", json!({})).await;
    h.bind("team", "rich", json!({})).await;
    h
}

async fn call(h: &TestHost, tool: &str, arguments: Value) -> (u16, Value) {
    h.call_tool("ada", tool, arguments).await
}

/// Asserts that calling `tool` fails with `502 <code>` and a message containing each of
/// `phrases`.
async fn fails(h: &TestHost, tool: &str, arguments: Value, code: &str, phrases: &[&str]) {
    let (s, b) = call(h, tool, arguments).await;
    let shown: String = b.to_string().chars().take(600).collect();
    assert_eq!((s, error_code(&b)), (502, code), "{tool}: {shown}");
    let message = b["error"]["message"].as_str().unwrap_or_default();
    for phrase in phrases {
        assert!(message.contains(phrase), "{tool}: no {phrase:?} in {b}");
    }
}

async fn world_of(h: &TestHost, slug: &str) -> String {
    let (s, b) = h
        .op(Method::GET, &format!("/api/v1/connectors/{slug}"), None)
        .await;
    assert_eq!(s, 200, "{b}");
    b["world"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_world_component_works_beside_a_current_one() {
    an_old_world_acme_works_beside_a_current_one(FIRST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_world_component_works_beside_a_current_one() {
    an_old_world_acme_works_beside_a_current_one(SECOND).await;
}

async fn an_old_world_acme_works_beside_a_current_one(old_world: &str) {
    let h = setup().await;
    h.bind("team", "acme", json!({"greeting": "hey"})).await;
    assert_eq!(world_of(&h, "acme").await, CURRENT);
    let (s, current) = call(&h, "acme.echo", json!({"message": "hi"})).await;
    assert_eq!(s, 200, "{current}");
    let (s, context) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!(s, 200, "{context}");
    assert_eq!(context["env"]["SPRING_CONNECTOR_ACME_GREETING"], "hey");

    // Rotate acme to its old build: same manifest, so the binding stays (the rotation
    // asked the old build's `bind` about it).
    let (s, b) = upload_component(&h.client, &h.url, built_in(old_world, "acme"), "").await;
    assert_eq!((s, b["world"].as_str()), (200, Some(old_world)), "{b}");
    assert_eq!(world_of(&h, "acme").await, old_world);
    assert_eq!(world_of(&h, "rich").await, CURRENT);
    let (s, again) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!((s, &again), (200, &context), "{old_world}");
    // A rebind asks the old build's `bind` again; its context follows.
    h.bind("team", "acme", json!({"greeting": "hello"})).await;
    let (_, rebound) = h
        .op(Method::GET, "/api/v1/agents/ada/runtime-context", None)
        .await;
    assert_eq!(rebound["env"]["SPRING_CONNECTOR_ACME_GREETING"], "hello");

    // The same answer, the same shape, from the old world.
    let (s, old) = call(&h, "acme.echo", json!({"message": "hi"})).await;
    assert_eq!((s, &old), (200, &current));
    assert!(
        old.get("content").is_none(),
        "a JSON result has no content: {old}"
    );
    let (s, ts) = call(&h, "acme.timestamp", json!({})).await;
    assert_eq!(s, 200, "{ts}");
    // Its own failures still come through as before.
    let (s, b) = call(&h, "acme.echo", json!({"message": 5})).await;
    assert_eq!((s, error_code(&b)), (422, "invalid_arguments"), "{b}");

    // And beside it, a 0.3.0 tool returns content blocks.
    let (s, img) = call(&h, "rich.image", json!({})).await;
    assert_eq!(s, 200, "{img}");
    assert_eq!(img["content"][0]["type"], "image");

    // MCP lists both and calls both, in a session and statelessly.
    let token = h.agent_token("ada").await;
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let list = session.rpc("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"acme.echo") && names.contains(&"rich.image"),
        "{names:?}"
    );
    let echoed = session.call("acme.echo", json!({"message": "hi"})).await;
    assert_eq!(
        echoed["result"]["structuredContent"], current["result"],
        "{echoed}"
    );
    assert_eq!(echoed["result"]["isError"], false);
    let stateless = Stateless::new(&h.url, "ada", &token);
    let echoed = stateless
        .rpc(
            "tools/call",
            json!({"name": "acme.echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert_eq!(
        echoed["result"]["structuredContent"], current["result"],
        "{echoed}"
    );

    // Rotate back: the current world again, the same answer.
    let bundled = connector_bundled::component("acme").expect("acme is bundled");
    let (s, b) = upload_component(&h.client, &h.url, bundled.to_vec(), "").await;
    assert_eq!((s, b["world"].as_str()), (200, Some(CURRENT)), "{b}");
    let (s, again) = call(&h, "acme.echo", json!({"message": "hi"})).await;
    assert_eq!((s, &again), (200, &current));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_returns_content_blocks_and_structured_results() {
    let h = setup().await;
    let (s, b) = call(&h, "rich.text", json!({})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"result": null, "content": [{"type": "text", "text": "This is a simple text response for testing."}]})
    );
    let (_, b) = call(&h, "rich.image", json!({})).await;
    assert_eq!(
        b["content"],
        json!([{"type": "image", "data": PNG_B64, "mimeType": "image/png"}])
    );
    let (_, b) = call(&h, "rich.audio", json!({})).await;
    assert_eq!(
        b["content"],
        json!([{"type": "audio", "data": WAV_B64, "mimeType": "audio/wav"}])
    );
    let (_, b) = call(&h, "rich.embedded_resource", json!({})).await;
    assert_eq!(
        b["content"],
        json!([{"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}])
    );
    let (_, b) = call(&h, "rich.resource_link", json!({})).await;
    assert_eq!(
        b["content"],
        json!([{"type": "resource_link", "uri": "https://example.com/report.pdf", "name": "report", "title": "Quarterly report", "description": "The report as a PDF", "mimeType": "application/pdf", "size": 1024}])
    );
    let (_, b) = call(&h, "rich.mixed", json!({})).await;
    let types: Vec<&str> = b["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, ["text", "image", "resource"], "{b}");
    assert_eq!(b["content"][2]["resource"]["blob"], "AAEC/w==");

    // Structured output, valid against the declared schema, beside its text.
    let (s, b) = call(&h, "rich.weather", json!({"city": "Oslo"})).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"], json!({"city": "Oslo", "celsius": 21.5}));
    assert_eq!(
        b["content"],
        json!([{"type": "text", "text": "Oslo: 21.5 °C"}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_world_rich_returns_what_the_current_one_does() {
    let h = setup().await;
    let cases = [
        ("rich.text", json!({})),
        ("rich.image", json!({})),
        ("rich.audio", json!({})),
        ("rich.mixed", json!({})),
        ("rich.resource_link", json!({})),
        ("rich.embedded_resource", json!({})),
        ("rich.weather", json!({"city": "Oslo"})),
        ("rich.broken_output", json!({})),
        ("rich.bad_media", json!({})),
    ];
    let mut current = Vec::new();
    for (tool, args) in &cases {
        current.push(call(&h, tool, args.clone()).await);
    }
    let (_, tools_now) = h.op(Method::GET, "/api/v1/agents/ada/tools", None).await;
    let (s, b) = upload_component(&h.client, &h.url, built_in(SECOND, "rich"), "").await;
    assert_eq!((s, b["world"].as_str()), (200, Some(SECOND)), "{b}");
    let (_, tools_then) = h.op(Method::GET, "/api/v1/agents/ada/tools", None).await;
    assert_eq!(
        tools_then, tools_now,
        "same tools, schemas and output schemas"
    );
    for ((tool, args), before) in cases.iter().zip(&current) {
        let answer = call(&h, tool, args.clone()).await;
        assert_eq!(&answer, before, "{tool}");
    }
    assert_eq!(current[7].0, 502, "broken_output fails in both worlds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_schemas_are_shown_and_enforced() {
    let h = setup().await;
    let (_, tools) = h.op(Method::GET, "/api/v1/agents/ada/tools", None).await;
    let find = |name: &str| {
        tools["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_default()
    };
    let weather = find("rich.weather");
    assert_eq!(weather["outputSchema"]["type"], "object", "{weather}");
    assert_eq!(
        weather["outputSchema"]["properties"]["celsius"]["type"],
        "number"
    );
    let echo = find("acme.echo");
    assert!(echo.get("outputSchema").is_none(), "{echo}");

    // A result that breaks the schema, or is missing, fails the call: the connector's
    // mistake never reaches the caller as if it were valid.
    fails(
        &h,
        "rich.broken_output",
        json!({}),
        "tool_failed",
        &["output schema", "/celsius"],
    )
    .await;
    fails(
        &h,
        "rich.missing_output",
        json!({}),
        "tool_failed",
        &["no structured result"],
    )
    .await;
    // Malformed blocks are the connector's fault, named.
    fails(
        &h,
        "rich.bad_media",
        json!({}),
        "connector_trapped",
        &["type/subtype"],
    )
    .await;
    // Binary output counts against the output limit.
    let five_mib = json!({"bytes": 5 * 1024 * 1024});
    fails(
        &h,
        "rich.big_image",
        five_mib,
        "connector_trapped",
        &["byte limit"],
    )
    .await;
    // So does a flood of empty blocks, which carries no data but costs the host a
    // structure per block and clients its framing.
    let flood = json!({"count": 200_000});
    fails(
        &h,
        "rich.many_blocks",
        flood,
        "connector_trapped",
        &["byte limit"],
    )
    .await;
    let (s, b) = call(&h, "rich.many_blocks", json!({"count": 10})).await;
    assert_eq!(
        (s, b["content"].as_array().map(Vec::len)),
        (200, Some(10)),
        "{b}"
    );
    let (s, _) = call(&h, "rich.big_image", json!({"bytes": 1024})).await;
    assert_eq!(s, 200);

    // Through MCP, in both eras: outputSchema listed; a broken result is `isError`.
    let token = h.agent_token("ada").await;
    for version in ["2025-06-18", "2025-11-25"] {
        let session = Mcp::open(&h.url, "ada", &token, version).await;
        let list = session.rpc("tools/list", json!({})).await;
        let listed = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "rich.weather")
            .cloned()
            .unwrap_or_default();
        assert_eq!(listed["outputSchema"], weather["outputSchema"], "{version}");
        let broken = session.call("rich.broken_output", json!({})).await;
        assert_eq!(broken["result"]["isError"], true, "{version}: {broken}");
        assert!(broken["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("output schema"));
    }
    let stateless = Stateless::new(&h.url, "ada", &token);
    let list = stateless.rpc("tools/list", json!({})).await;
    assert!(list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "rich.weather" && t["outputSchema"] == weather["outputSchema"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_results_carry_the_content_blocks_in_both_eras() {
    let h = setup().await;
    let token = h.agent_token("ada").await;
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let stateless = Stateless::new(&h.url, "ada", &token);
    for (tool, args) in [
        ("rich.image", json!({})),
        ("rich.audio", json!({})),
        ("rich.mixed", json!({})),
        ("rich.resource_link", json!({})),
        ("rich.embedded_resource", json!({})),
        ("rich.weather", json!({"city": "Oslo"})),
    ] {
        let (_, http) = call(&h, tool, args.clone()).await;
        let in_session = session.call(tool, args.clone()).await;
        let without = stateless
            .rpc("tools/call", json!({"name": tool, "arguments": args}))
            .await;
        for answer in [&in_session["result"], &without["result"]] {
            assert_eq!(answer["content"], http["content"], "{tool}: {answer}");
            assert_eq!(answer["isError"], false, "{tool}");
        }
        if http["result"].is_null() {
            assert!(
                in_session["result"].get("structuredContent").is_none(),
                "{tool}"
            );
        } else {
            assert_eq!(
                in_session["result"]["structuredContent"], http["result"],
                "{tool}"
            );
        }
    }
    let weather = session.call("rich.weather", json!({"city": "Oslo"})).await;
    assert_eq!(
        weather["result"]["structuredContent"],
        json!({"city": "Oslo", "celsius": 21.5})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_the_cli_show_the_world_and_the_content() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("acme-0.1.0.wasm");
    std::fs::write(&old, first_world("acme")).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(integration_tests::harness::host_binary())
            .args(args)
            .output()
            .expect("connector-host runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = run(&["inspect", old.to_str().unwrap(), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let info: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["world"], FIRST);
    let second = dir.path().join("acme-0.2.0.wasm");
    std::fs::write(&second, built_in(SECOND, "acme")).unwrap();
    let (code, out, err) = run(&["inspect", second.to_str().unwrap(), "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let info: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["world"], SECOND);
    let (code, out, err) = run(&["inspect", guests::RICH, "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let info: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(info["world"], CURRENT);
    // Without --json: the description a person reads, naming the world.
    let (code, out, err) = run(&["inspect", guests::RICH]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(&format!("world:         {CURRENT}")) && out.contains("rich.image"),
        "{out}"
    );
    assert!(
        serde_json::from_str::<Value>(&out).is_err(),
        "not JSON: {out}"
    );

    // A local call prints a JSON result as is, and a rich one's blocks as text (with
    // --json: the whole answer, {"result", "content"}).
    let (code, out, err) = run(&[
        "call",
        old.to_str().unwrap(),
        "echo",
        r#"{"message": "hi"}"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["message"],
        "hi",
        "{out}"
    );
    let (code, out, err) = run(&[
        "call",
        second.to_str().unwrap(),
        "echo",
        r#"{"message": "hi"}"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["message"],
        "hi",
        "{out}"
    );
    let (code, out, err) = run(&["call", guests::RICH, "image", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["content"][0]["data"], PNG_B64, "{out}");
    let (code, out, err) = run(&["call", guests::RICH, "image"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("[image image/png, "), "{out}");
    assert!(!out.contains(PNG_B64), "no base64 in the text form: {out}");
    assert!(err.contains("ok: rich.image locally"), "{err}");
    let (code, _, err) = run(&["call", guests::RICH, "broken_output"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("output schema"), "{err}");
}
