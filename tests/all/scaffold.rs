//! docs/writing-a-connector.md, followed mechanically: `connector-host new` (which builds
//! the crate for wasm32-wasip2), `inspect` it, then `connector-host dev --live` installs,
//! binds and calls it through a real host over HTTP, again after an edit and a rebuild;
//! and the `connector-testing` harness from a plain `#[test]`.
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
    host_binary, machine_load_blocking, scaffold_target_dir, send, ServerProcess, OPERATOR_TOKEN,
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
    /// The crate (only `the_scaffold_is_live_in_a_host_in_three_commands` edits it).
    dir: tempfile::TempDir,
    /// Where cargo writes the component.
    built: PathBuf,
    /// A copy of the first build, for the tests that only read it.
    wasm: PathBuf,
    _copy: tempfile::TempDir,
}

fn scaffold() -> &'static Scaffold {
    static SCAFFOLD: OnceLock<Scaffold> = OnceLock::new();
    SCAFFOLD.get_or_init(|| {
        let _alone = machine_load_blocking();
        let dir = tempfile::tempdir().expect("temp dir");
        let started = Instant::now();

        // 1. Scaffold, and build once. Offline first: every dependency of the scaffold is
        // a dependency of this workspace, so it is in the local registry cache once the
        // workspace has built.
        let new = |offline: bool| {
            let mut cmd = Command::new(host_binary());
            cmd.args([
                "new",
                "demo_conn",
                "--dir",
                dir.path().to_str().expect("utf-8 temp dir"),
            ])
            .env("RUST_LOG", "error")
            .env("CARGO_TARGET_DIR", scaffold_target_dir());
            if offline {
                cmd.env("CARGO_NET_OFFLINE", "true");
            }
            cmd.output().expect("run connector-host new")
        };
        let out = new(true);
        let built = scaffold_target_dir().join("wasm32-wasip2/release/demo_conn.wasm");
        if out.status.success() {
            // The exact component path and the next command are printed.
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains(&format!(
                    "connector-host dev {} --live --call hello",
                    built.display()
                )),
                "{}",
                text(&out)
            );
        } else {
            eprintln!("offline build failed, building online:\n{}", text(&out));
            let out = cargo_build(dir.path(), false);
            assert!(out.status.success(), "cargo build: {}", text(&out));
        }
        // Refuses to overwrite what it just wrote.
        let again = host(&["new", "demo_conn", "--dir", dir.path().to_str().unwrap()]);
        assert_eq!(again.status.code(), Some(2), "{}", text(&again));

        // 2. Inspect.
        let out = host(&["inspect", built.to_str().expect("utf-8 path"), "--json"]);
        assert!(out.status.success(), "inspect: {}", text(&out));
        let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(info["slug"], "demo_conn");
        assert_eq!(info["tools"][0]["name"], "demo_conn.hello");
        assert_eq!(
            info["tools"][0]["inputSchema"]["properties"]["name"]["description"],
            "Who to greet."
        );
        eprintln!(
            "scaffold: `connector-host new` (with its build) to a passing `inspect` took {:.1?}",
            started.elapsed()
        );

        // 3. A local call.
        let out = host(&[
            "call",
            built.to_str().unwrap(),
            "hello",
            r#"{"name": "Ada"}"#,
        ]);
        assert!(out.status.success(), "call: {}", text(&out));
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(result, json!({"greeting": "Hello, Ada!"}));

        let copy = tempfile::tempdir().expect("temp dir");
        let wasm = copy.path().join("demo_conn.wasm");
        std::fs::copy(&built, &wasm).expect("copy the component");
        Scaffold {
            dir,
            built,
            wasm,
            _copy: copy,
        }
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
    let out = host(&[
        "new",
        "my-conn",
        "--namespace",
        "my_conn",
        "--dir",
        d,
        "--no-build",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // Not built: the build command comes first in the next steps, and only there.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let build = format!("cd {d} && cargo build --target wasm32-wasip2 --release");
    assert_eq!(stdout.matches(&build).count(), 1, "{}", text(&out));
    let steps = stdout.split("Next steps:").nth(1).unwrap_or_default();
    assert!(
        steps.trim_start().starts_with(&build),
        "the build comes first: {}",
        text(&out)
    );
}

/// A `connector-host dev` child whose stdout lines arrive on a channel.
struct DevLoop {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl DevLoop {
    fn start(args: &[&str]) -> DevLoop {
        use std::io::BufRead;
        let mut child = Command::new(host_binary())
            .arg("dev")
            .args(args)
            .env("RUST_LOG", "error")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn dev");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        DevLoop {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn until(&mut self, needle: &str) -> String {
        read_until(&self.lines, &mut self.seen, needle)
    }
}

impl Drop for DevLoop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shortest path, mechanically: `new` (which builds), then `dev --live` against a
/// running host (which installs, creates unit and agent, binds and calls as the agent
/// over HTTP), then an edit and `cargo build`, live at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scaffold_is_live_in_a_host_in_three_commands() {
    let (dir, built) = tokio::task::spawn_blocking(|| {
        let s = scaffold();
        (s.dir.path().to_path_buf(), s.built.clone())
    })
    .await
    .expect("scaffold");
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;

    let started = Instant::now();
    let mut dev = DevLoop::start(&[
        built.to_str().unwrap(),
        "--live",
        "--url",
        &server.url,
        "--token",
        OPERATOR_TOKEN,
        "--call",
        "hello",
        r#"{"name": "Ada"}"#,
    ]);
    let dev = tokio::task::spawn_blocking(move || {
        dev.until("live: installed `demo_conn`");
        dev.until("unit `dev` (created), agent `dev` (created), `demo_conn` bound on `dev`");
        dev.until("live: call demo_conn.hello as agent `dev`");
        dev.until("Hello, Ada!");
        dev
    })
    .await
    .expect("dev loop");
    eprintln!(
        "scaffold: `dev --live` to a bound call took {:.1?}",
        started.elapsed()
    );

    // The host holds what the loop said: an agent that can call the tool.
    let client = reqwest::Client::new();
    let (s, b) = send(
        &client,
        reqwest::Method::POST,
        &format!("{}/api/v1/agents/dev/tool-calls", server.url),
        Some(OPERATOR_TOKEN),
        Some(json!({"tool": "demo_conn.hello", "arguments": {"name": "Bo"}})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["result"]["greeting"], "Hello, Bo!", "{b}");

    // Edit, rebuild: live at once.
    let lib = dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).expect("lib.rs");
    std::fs::write(&lib, source.replace("\"Hello, {}!\"", "\"Hi, {}!\"")).expect("edit");
    let rebuilt = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        let _alone = machine_load_blocking();
        cargo_build(&dir, true)
    })
    .await
    .expect("build");
    assert!(out.status.success(), "rebuild: {}", text(&out));
    tokio::task::spawn_blocking(move || {
        let mut dev = dev;
        dev.until("live: rotated `demo_conn`");
        dev.until("`demo_conn` rebound on `dev`");
        dev.until("Hi, Ada!");
    })
    .await
    .expect("dev loop");
    eprintln!(
        "scaffold: edit to a live call of the rebuilt component took {:.1?}",
        rebuilt.elapsed()
    );
}

/// A rotation the host refuses is shown with the bindings it would break, and the loop
/// goes on with the next build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_live_shows_a_refused_rotation_and_goes_on() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let watched = tempfile::tempdir().unwrap();
    let file = watched.path().join("hostile.wasm");
    std::fs::copy(guests::HOSTILE, &file).unwrap();
    let mut dev = DevLoop::start(&[
        file.to_str().unwrap(),
        "--live",
        "--url",
        &server.url,
        "--token",
        OPERATOR_TOKEN,
        "--unit",
        "try",
        "--agent",
        "tester",
        "--call",
        "counter",
        "{}",
    ]);
    let file2 = file.clone();
    tokio::task::spawn_blocking(move || {
        dev.until("live: installed `hostile`");
        dev.until("unit `try` (created), agent `tester` (created), `hostile` bound on `try`");
        dev.until("live: call hostile.counter as agent `tester`");
        dev.until("watching for changes");
        // v2 requires a `region` the binding does not have: the host refuses.
        std::fs::copy(guests::HOSTILE_V2, &file2).unwrap();
        dev.until("refused the new version");
        dev.until("rotation_breaks_bindings");
        dev.until("\"try\"");
        dev.until("watching for changes");
        // Back to v1: accepted, bound and called again.
        std::fs::copy(guests::HOSTILE, &file2).unwrap();
        dev.until("live: rotated `hostile`");
        dev.until("`hostile` rebound on `try`");
        dev.until("live: call hostile.counter");
    })
    .await
    .expect("dev loop");
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
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("watched.wasm");
    std::fs::copy(guests::HOSTILE, &file).unwrap();
    let mut dev = DevLoop::start(&[file.to_str().unwrap(), "--call", "counter", "{}"]);
    dev.until("loaded");
    dev.until("hostile.counter");
    dev.until("watching for changes");

    // A new version: the v2 guest requires a `region` in the config.
    std::fs::copy(guests::HOSTILE_V2, &file).unwrap();
    dev.until("reloaded");
    dev.until("~ config schema");
    dev.until("digest:");
    dev.until("watching for changes");

    // A broken one is reported and the loop goes on.
    std::fs::copy(guests::BAD_MANIFEST_UPPERCASE_ID, &file).unwrap();
    dev.until("INVALID");
    dev.until("rule: tool_id_pattern");
    dev.until("watching for changes");
}

/// `dev --live` started before the host: it says it is waiting (with its backoff), then
/// installs, binds and calls as soon as the host answers, without another rebuild.
#[test]
fn dev_live_waits_for_a_host_that_is_not_up_yet() {
    let port = integration_tests::harness::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let watched = tempfile::tempdir().unwrap();
    let file = watched.path().join("hostile.wasm");
    std::fs::copy(guests::HOSTILE, &file).unwrap();
    let mut dev = DevLoop::start(&[
        file.to_str().unwrap(),
        "--live",
        "--url",
        &url,
        "--token",
        OPERATOR_TOKEN,
        "--call",
        "counter",
        "{}",
    ]);
    let first = dev.until("live: waiting for host at");
    assert!(
        first.contains(&url) && first.contains("next attempt in 0.5 s"),
        "{first}"
    );
    dev.until("next attempt in 1.0 s");

    let data = tempfile::tempdir().unwrap();
    let mut serve = Command::new(host_binary())
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data.path())
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve");
    dev.until("live: the host answers");
    dev.until("live: installed `hostile`");
    let call = dev.until("live: call hostile.counter as agent `dev`");
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(!call.contains("failed"), "{call}");
    let waits = dev
        .seen
        .iter()
        .filter(|l| l.contains("waiting for host"))
        .count();
    assert!(waits >= 2, "{:?}", dev.seen);
}
