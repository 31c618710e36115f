//! docs/writing-a-connector.md, followed mechanically: `connector-host new`, build the
//! crate for wasm32-wasip2, `inspect` it, then install, bind and call it through a real
//! host over HTTP; and the `connector-testing` harness from a plain `#[test]`.
//!
//! The scaffold is built with CARGO_TARGET_DIR=target/scaffold so its dependencies are
//! compiled once and shared between runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use connector_testing::Harness;
use integration_tests::guests;
use integration_tests::harness::{
    host_binary, send, upload_component, ServerProcess, OPERATOR_TOKEN,
};
use serde_json::json;

fn host(args: &[&str]) -> Output {
    Command::new(host_binary())
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("run connector-host")
}

fn text(out: &Output) -> String {
    format!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `target/scaffold`, next to the profile directory of this test run.
fn scaffold_target_dir() -> PathBuf {
    let bin = host_binary();
    let target = bin
        .parent()
        .and_then(Path::parent)
        .expect("the target directory");
    target.join("scaffold")
}

fn cargo_build(dir: &Path, offline: bool) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir)
        .args(["build", "--target", "wasm32-wasip2", "--release"])
        .env("CARGO_TARGET_DIR", scaffold_target_dir());
    if offline {
        cmd.arg("--offline");
    }
    cmd.output().expect("run cargo")
}

/// The scaffolded, built component (created once per test binary).
struct Scaffold {
    _dir: tempfile::TempDir,
    wasm: PathBuf,
}

fn scaffold() -> &'static Scaffold {
    static SCAFFOLD: OnceLock<Scaffold> = OnceLock::new();
    SCAFFOLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let started = Instant::now();

        // 1. Scaffold.
        let out = host(&[
            "new",
            "demo_conn",
            "--dir",
            dir.path().to_str().expect("utf-8 temp dir"),
        ]);
        assert!(out.status.success(), "new: {}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Next steps"));
        // Refuses to overwrite what it just wrote.
        let again = host(&["new", "demo_conn", "--dir", dir.path().to_str().unwrap()]);
        assert_eq!(again.status.code(), Some(2), "{}", text(&again));

        // 2. Build. Offline first: every dependency of the scaffold is a dependency of this
        // workspace, so it is in the local registry cache once the workspace has built.
        let mut out = cargo_build(dir.path(), true);
        if !out.status.success() {
            eprintln!(
                "offline build failed, retrying online:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out = cargo_build(dir.path(), false);
        }
        assert!(out.status.success(), "cargo build: {}", text(&out));
        let wasm = scaffold_target_dir().join("wasm32-wasip2/release/demo_conn.wasm");

        // 3. Inspect.
        let out = host(&["inspect", wasm.to_str().expect("utf-8 path")]);
        assert!(out.status.success(), "inspect: {}", text(&out));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(info["slug"], "demo_conn");
        assert_eq!(info["tools"][0]["name"], "demo_conn.hello");
        assert_eq!(
            info["tools"][0]["inputSchema"]["properties"]["name"]["description"],
            "Who to greet."
        );
        eprintln!(
            "scaffold: `connector-host new` to a passing `inspect` took {:.1?}",
            started.elapsed()
        );

        // 4. A local call.
        let out = host(&[
            "call",
            wasm.to_str().unwrap(),
            "hello",
            r#"{"name": "Ada"}"#,
        ]);
        assert!(out.status.success(), "call: {}", text(&out));
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(result, json!({"greeting": "Hello, Ada!"}));

        Scaffold { _dir: dir, wasm }
    })
}

#[test]
fn new_refuses_bad_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("x");
    let d = d.to_str().unwrap();
    let out = host(&["new", "my-conn", "--dir", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--namespace my_conn"),
        "{}",
        text(&out)
    );
    let out = host(&["new", "Bad", "--dir", d]);
    assert_eq!(out.status.code(), Some(2));
    let out = host(&["new", "my-conn", "--namespace", "my_conn", "--dir", d]);
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaffold_installs_binds_and_answers_through_a_host() {
    let wasm = tokio::task::spawn_blocking(|| scaffold().wasm.clone())
        .await
        .expect("scaffold");
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", server.url);

    let (status, body) =
        upload_component(&client, &server.url, std::fs::read(&wasm).unwrap(), "").await;
    assert!(status == 201 || status == 200, "install: {status} {body}");
    assert_eq!(body["slug"], "demo_conn");

    let op = |method, path: &str, body| {
        let client = client.clone();
        let target = url(path);
        async move { send(&client, method, &target, Some(OPERATOR_TOKEN), Some(body)).await }
    };
    let (s, b) = op(reqwest::Method::PUT, "/api/v1/units/demo", json!({})).await;
    assert!(s == 201 || s == 200, "unit: {s} {b}");
    let (s, b) = op(
        reqwest::Method::PUT,
        "/api/v1/agents/ada",
        json!({"units": ["demo"]}),
    )
    .await;
    assert!(s == 201 || s == 200, "agent: {s} {b}");
    let (s, b) = op(
        reqwest::Method::PUT,
        "/api/v1/units/demo/connectors/demo_conn",
        json!({"config": {}}),
    )
    .await;
    assert!(s == 201 || s == 200, "bind: {s} {b}");
    let (s, b) = op(
        reqwest::Method::POST,
        "/api/v1/agents/ada/tool-calls",
        json!({"tool": "demo_conn.hello", "arguments": {"name": "Ada"}}),
    )
    .await;
    assert_eq!(s, 200, "call: {b}");
    assert_eq!(b["result"]["greeting"], "Hello, Ada!", "{b}");
}

#[test]
fn the_testing_harness_runs_the_scaffold_and_the_hostile_guest() {
    let mut h = Harness::load(&scaffold().wasm).expect("loads");
    assert_eq!(h.info().slug, "demo_conn");
    assert_eq!(h.bind(json!({})).expect("binds"), Vec::<String>::new());
    assert_eq!(
        h.call("hello", json!({"name": "Ada"})).expect("calls"),
        json!({"greeting": "Hello, Ada!"})
    );
    let e = h.call("hello", json!({"nom": "Ada"})).unwrap_err();
    assert_eq!(e.code, "invalid_arguments", "{e}");
    let e = h.call("hello", json!({"name": " "})).unwrap_err();
    assert_eq!(e.code, "invalid_arguments", "{e}");
    assert!(e.message.contains("name is empty"), "{e}");
    let e = h.bind(json!({"extra": 1})).unwrap_err();
    assert_eq!(e.code, "invalid_config", "{e}");

    let mut hostile = Harness::load(guests::HOSTILE).expect("loads");
    assert_eq!(hostile.call("counter", json!({})).unwrap(), json!(1));
    assert_eq!(
        hostile.call("hostile.counter", json!({})).unwrap(),
        json!(1),
        "every call is a fresh instance"
    );
    let e = hostile
        .call("panic", json!({"message": "harness"}))
        .unwrap_err();
    assert_eq!(e.code, "connector_trapped", "{e}");

    // Routing keys, webhook translation, the per-binding filter, the runtime context.
    let routes = hostile
        .bind(json!({"routes": ["r1"], "reject_kinds": ["spam"]}))
        .expect("binds");
    assert_eq!(routes, ["r1"]);
    let messages = hostile
        .translate(
            &[("webhook-id", "msg_1")],
            r#"{"messages": [{"route": "r1", "kind": "ping", "payload": {"a": 1}}, {"route": "r1", "kind": "spam"}]}"#,
        )
        .expect("translates");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].payload, json!({"a": 1}));
    assert!(hostile.accept(&messages[0]).unwrap());
    assert!(!hostile.accept(&messages[1]).unwrap());
    let ctx = hostile.runtime_context().expect("context");
    assert_eq!(
        ctx.env,
        [(
            "SPRING_CONNECTOR_HOSTILE_UNIT".to_string(),
            "test".to_string()
        )]
    );
    hostile.bind(json!({"env": {"PATH": "/evil"}})).unwrap();
    let e = hostile.runtime_context().unwrap_err();
    assert_eq!(e.code, "context_conflict", "{e}");

    let e = Harness::load(guests::BAD_MANIFEST_UPPERCASE_ID).unwrap_err();
    assert_eq!(e.code, "tool_id_pattern", "{e}");
    assert!(e.message.contains("Acme.Echo"), "{e}");
}

/// Reads the child's stdout until a line containing `needle` (or panics after 60 s).
fn read_until(
    lines: &std::sync::mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    needle: &str,
) -> String {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Err(_) => panic!(
                "no line containing {needle:?}; output so far:\n{}",
                seen.join("\n")
            ),
        }
    }
}

#[test]
fn dev_reloads_and_prints_manifest_changes() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watched.wasm");
    std::fs::copy(guests::HOSTILE, &file).unwrap();
    let mut child = Command::new(host_binary())
        .args(["dev", file.to_str().unwrap(), "--call", "counter", "{}"])
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn dev");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "loaded");
    read_until(&rx, &mut seen, "hostile.counter");
    read_until(&rx, &mut seen, "watching for changes");

    // A new version: the v2 guest requires a `region` in the config.
    std::fs::copy(guests::HOSTILE_V2, &file).unwrap();
    read_until(&rx, &mut seen, "reloaded");
    read_until(&rx, &mut seen, "~ config schema");
    read_until(&rx, &mut seen, "digest:");
    read_until(&rx, &mut seen, "watching for changes");

    // A broken one is reported and the loop goes on.
    std::fs::copy(guests::BAD_MANIFEST_UPPERCASE_ID, &file).unwrap();
    read_until(&rx, &mut seen, "INVALID");
    read_until(&rx, &mut seen, "rule: tool_id_pattern");
    read_until(&rx, &mut seen, "watching for changes");

    let _ = child.kill();
    let _ = child.wait();
}
