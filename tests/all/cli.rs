//! The `connector-host` binary as a connector developer and an operator use it.

use std::process::{Command, Output};

use integration_tests::guests;
use integration_tests::harness::{host_binary, ServerProcess, OPERATOR_TOKEN};
use serde_json::Value;

fn run(args: &[&str], url: Option<&str>) -> Output {
    let mut cmd = Command::new(host_binary());
    cmd.args(args)
        .env_remove("CONNECTOR_HOST_OPERATOR_TOKEN")
        .env("RUST_LOG", "error");
    if let Some(url) = url {
        cmd.env("CONNECTOR_HOST_URL", url)
            .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN);
    }
    cmd.output().expect("run connector-host")
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn inspect_prints_the_connector_or_names_the_broken_rule() {
    let out = run(&["inspect", guests::HOSTILE, "--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = stdout_json(&out);
    assert_eq!(c["slug"], "hostile");
    assert_eq!(c["webhook"]["scheme"], "standard-webhooks");
    assert!(c["digest"].as_str().unwrap().starts_with("sha256:"));

    let out = run(&["inspect", guests::BAD_MANIFEST_UPPERCASE_ID], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Acme.Echo") && err.contains("tool_id_pattern"),
        "{err}"
    );

    let out = run(&["inspect", "/definitely/missing.wasm"], None);
    assert!(!out.status.success());
}

#[test]
fn call_runs_one_tool_locally() {
    let out = run(&["call", guests::HOSTILE, "counter", "{}"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout_json(&out), serde_json::json!(1));
    let out = run(
        &[
            "call",
            guests::HOSTILE,
            "hostile.huge",
            r#"{"bytes": "many"}"#,
        ],
        None,
    );
    assert!(
        !out.status.success(),
        "schema violations are refused before the guest runs"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("/bytes"));
    let out = run(
        &["call", guests::HOSTILE, "panic", r#"{"message":"cli"}"#],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("deliberate panic: cli"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_day_over_the_cli() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let ok = |args: &[&str]| {
            let out = run(args, Some(&url));
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out
        };
        ok(&["connectors", "install", guests::HOSTILE]);
        let list = stdout_json(&ok(&["connectors", "list", "--json"]));
        assert!(list["connectors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["slug"] == "hostile"));
        ok(&["units", "put", "eng"]);
        ok(&["units", "put", "backend", "--parent", "eng"]);
        ok(&["agents", "put", "ada", "--unit", "backend"]);
        ok(&["bind", "eng", "acme", "--config", r#"{"greeting":"hi"}"#]);
        let table = String::from_utf8(ok(&["tools", "--agent", "ada"]).stdout).unwrap();
        assert!(
            table.contains("acme.echo")
                && table.contains("connector:acme")
                && table.contains("eng"),
            "{table}"
        );
        let json = stdout_json(&ok(&["tools", "--agent", "ada", "--json"]));
        assert!(json.to_string().contains("acme.timestamp"));
        let result = stdout_json(&ok(&[
            "call",
            "ada",
            "acme.echo",
            r#"{"message":"from the cli"}"#,
        ]));
        assert_eq!(result["message"], "from the cli");
        let ctx = String::from_utf8(ok(&["context", "ada", "--env"]).stdout).unwrap();
        assert!(ctx.contains("SPRING_CONNECTOR_ACME_GREETING='hi'"), "{ctx}");
        ok(&[
            "bind",
            "backend",
            "hostile",
            "--config",
            r#"{"files": {".spring/connectors/hostile/notes.txt": "hello file"}}"#,
        ]);
        let dir = tempfile::tempdir().unwrap();
        ok(&[
            "context",
            "ada",
            "--write-files",
            dir.path().to_str().unwrap(),
        ]);
        let written =
            std::fs::read_to_string(dir.path().join(".spring/connectors/hostile/notes.txt"))
                .unwrap();
        assert_eq!(written, "hello file");
        ok(&["unbind", "backend", "hostile"]);
        ok(&["unbind", "eng", "acme"]);
        let out = run(
            &["call", "ada", "acme.echo", r#"{"message":"x"}"#],
            Some(&url),
        );
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("tool_not_granted"));
        ok(&["connectors", "remove", "hostile"]);
        ok(&["agents", "delete", "ada"]);
        ok(&["units", "delete", "backend"]);
        ok(&["units", "delete", "eng"]);
        let out = run(&["units", "get", "eng"], Some(&url));
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"));
    })
    .await
    .unwrap();
    // Not reachable: a clear message.
    let out = run(&["units", "get", "x"], Some("http://127.0.0.1:9"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("connector-host serve"));
}

#[test]
fn a_guest_log_line_cannot_forge_a_host_log_line() {
    let forged =
        "2026-01-01T00:00:00.000000Z ERROR connector_host::auth: FORGED operator token accepted";
    let message = format!("harmless\n{forged}\r\n\u{1b}[2Jcleared");
    let args = serde_json::json!({ "message": message }).to_string();
    let out = Command::new(host_binary())
        .args(["call", guests::HOSTILE, "log", &args])
        .env("RUST_LOG", "info")
        .output()
        .expect("run connector-host");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("harmless"),
        "the guest's log is shown: {stderr}"
    );
    for line in stderr.lines() {
        assert!(!line.starts_with(forged), "a forged line: {line:?}");
        assert!(!line.contains('\u{1b}'), "a raw escape sequence: {line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn printed_context_sets_no_other_variable() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let ok = |args: &[&str]| {
            let out = run(args, Some(&url));
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out
        };
        ok(&["connectors", "install", guests::HOSTILE]);
        ok(&["units", "put", "u"]);
        ok(&["agents", "put", "ada", "--unit", "u"]);
        let value = "x LD_PRELOAD=/tmp/evil.so PATH=/tmp 'q' $(id) `id`";
        let config = serde_json::json!({"env": {"SPRING_CONNECTOR_HOSTILE_X": value}});
        ok(&["bind", "u", "hostile", "--config", &config.to_string()]);
        let printed = String::from_utf8(ok(&["context", "ada", "--env"]).stdout).expect("utf-8");
        // Word-split by `env -i $(...)`: nothing but the one variable is set.
        let split = Command::new("sh")
            .args(["-c", "env -i $1 /usr/bin/env", "sh", &printed])
            .output()
            .expect("sh");
        let names: Vec<String> = String::from_utf8_lossy(&split.stdout)
            .lines()
            .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_string()))
            .collect();
        assert_eq!(names, ["SPRING_CONNECTOR_HOSTILE_X"], "{printed}");
        // `eval`ed: exactly the value.
        let evaluated = Command::new("bash")
            .args([
                "-c",
                "eval \"$1\"; printf %s \"$SPRING_CONNECTOR_HOSTILE_X\"",
                "bash",
                &printed,
            ])
            .output()
            .expect("bash");
        assert_eq!(String::from_utf8_lossy(&evaluated.stdout), value);
        let json: Value =
            serde_json::from_slice(&ok(&["context", "ada", "--env", "--format", "json"]).stdout)
                .expect("json");
        assert_eq!(json["SPRING_CONNECTOR_HOSTILE_X"], value);
    })
    .await
    .expect("the CLI steps");
}

/// `call FILE.wasm --secret NAME=VALUE`: the secret reaches a local call whose config
/// names it (as on a host), and its value is never printed.
#[test]
fn a_local_call_reads_a_secret_the_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("github.wasm");
    std::fs::write(
        &wasm,
        connector_bundled::component("github").expect("bundled github"),
    )
    .unwrap();
    let wasm = wasm.to_str().unwrap();
    let value = "ghp_NeverPrinted0123456789";
    let config = r#"{"repo": "octo/hello", "patSecret": "ci-bot"}"#;
    let call = |extra: &[&str]| {
        let mut args = vec![
            "call",
            wasm,
            "get_issue",
            r#"{"number": 1}"#,
            "--config",
            config,
            // Only a host the component does not declare: GitHub is never asked.
            "--allow-host",
            "127.0.0.1",
        ];
        args.extend_from_slice(extra);
        run(&args, None)
    };
    let without = call(&[]);
    assert_eq!(without.status.code(), Some(1));
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(
        err.contains("the secret `ci-bot` named by patSecret is not configured"),
        "{err}"
    );

    let secret = format!("ci-bot={value}");
    let with = call(&["--secret", &secret, "--secret", "unused=also-secret"]);
    assert_eq!(with.status.code(), Some(1), "GitHub is out of reach");
    let err = String::from_utf8_lossy(&with.stderr);
    assert!(
        !err.contains("not configured"),
        "the secret was read: {err}"
    );
    assert!(
        err.contains("does not allow requests to api.github.com"),
        "{err}"
    );
    assert!(err.contains("names no secret `unused`"), "{err}");
    for out in [&with.stdout, &with.stderr] {
        let text = String::from_utf8_lossy(out);
        assert!(
            !text.contains(value) && !text.contains("also-secret"),
            "{text}"
        );
    }
    let bad = call(&["--secret", value]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&bad.stderr).contains(value));
}
