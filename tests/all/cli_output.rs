//! The command line's one output rule (CONTRACT §13) against a real `connector-host
//! serve`: a table or a one-line summary by default, the full JSON with `--json`, only
//! the value with `--raw`; exit codes 0, 1 and 2; `units list`, `agents list`, `messages
//! --follow`, `connectors install --force`, grant and revoke with the same arguments, and
//! hints that name the command line's own flags.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use integration_tests::guests;
use integration_tests::harness::{
    host_binary, now_unix, send_standard_webhook, ServerProcess, OPERATOR_TOKEN,
};
use serde_json::{json, Value};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

fn command(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(host_binary());
    cmd.args(args)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error");
    cmd
}

fn run(url: &str, args: &[&str]) -> Output {
    command(url, args).output().expect("run connector-host")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `args`, asserts exit 0, returns stdout.
fn ok(url: &str, args: &[&str]) -> String {
    let out = run(url, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    stdout(&out)
}

/// Runs `args` with `--json`, asserts exit 0, returns the parsed stdout.
fn ok_json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let text = ok(url, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}): {text}"))
}

/// One line, no JSON.
fn assert_summary(text: &str, needle: &str) {
    assert_eq!(text.lines().count(), 1, "one line: {text:?}");
    assert!(text.contains(needle), "{needle:?} in {text:?}");
    assert!(
        serde_json::from_str::<Value>(text).is_err(),
        "a summary, not JSON: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_command_prints_a_summary_a_table_or_json() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let url = url.as_str();
        // Units: put (created, then updated), list (table, filters, JSON), get.
        assert_summary(&ok(url, &["units", "put", "eng"]), "unit `eng` created");
        assert_summary(
            &ok(url, &["units", "put", "eng", "--display-name", "Engineering"]),
            "unit `eng` updated",
        );
        ok(url, &["units", "put", "eng-backend", "--parent", "eng"]);
        ok(url, &["units", "put", "ops"]);
        let table = ok(url, &["units", "list"]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("ID") && lines[0].contains("BINDINGS"), "{table}");
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[1].starts_with("eng ") && lines[1].contains("Engineering"), "{table}");
        let children = ok_json(url, &["units", "list", "--parent", "eng"]);
        assert_eq!(children["units"].as_array().map(Vec::len), Some(1), "{children}");
        assert_eq!(children["units"][0]["id"], "eng-backend");
        let roots = ok_json(url, &["units", "list", "--roots"]);
        let ids: Vec<&str> = roots["units"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|u| u["id"].as_str())
            .collect();
        assert_eq!(ids, ["eng", "ops"]);
        let unit = ok(url, &["units", "get", "eng"]);
        assert!(unit.contains("Engineering") && unit.contains("sv.tools.list"), "{unit}");
        assert_eq!(ok_json(url, &["units", "get", "eng"])["id"], "eng");

        // Agents.
        assert_summary(
            &ok(url, &["agents", "put", "ada", "--unit", "eng-backend"]),
            "agent `ada` created",
        );
        ok(url, &["agents", "put", "bob", "--unit", "ops"]);
        let table = ok(url, &["agents", "list", "--unit", "eng-backend"]);
        assert_eq!(table.lines().count(), 2, "{table}");
        assert!(table.lines().nth(1).unwrap().starts_with("ada "), "{table}");
        let all = ok_json(url, &["agents", "list"]);
        assert_eq!(all["agents"].as_array().map(Vec::len), Some(2), "{all}");

        // Bind, bindings, tools.
        assert_summary(
            &ok(url, &["bind", "eng", "acme"]),
            "`acme` bound to unit `eng`: grants acme.*",
        );
        let bindings = ok(url, &["bindings", "eng"]);
        assert!(bindings.starts_with("CONNECTOR") && bindings.contains("acme.*"), "{bindings}");
        let tools = ok(url, &["tools", "--agent", "ada"]);
        assert!(tools.contains("acme.echo") && tools.contains("eng"), "{tools}");

        // Grant and revoke take the same arguments.
        assert_summary(
            &ok(url, &["grant", "--agent", "bob", "--tool", "acme.echo"]),
            "granted `acme.echo` to agent `bob`",
        );
        let granted = ok_json(url, &["tools", "--agent", "bob"]);
        assert!(granted.to_string().contains("\"explicit\""), "{granted}");
        assert_summary(
            &ok(url, &["revoke", "--agent", "bob", "--tool", "acme.echo"]),
            "revoked `acme.echo` from agent `bob`",
        );
        let out = run(url, &["revoke", "--agent", "bob", "acme.echo"]);
        assert_eq!(out.status.code(), Some(2), "bad usage: {}", stderr(&out));

        // An agent token: a summary, the JSON, or only the token, which works as --token.
        let summary = ok(url, &["agents", "token", "ada"]);
        assert_summary(&summary, "expires");
        let issued = ok_json(url, &["agents", "token", "ada"]);
        assert!(issued["token"].is_string() && issued["expiresAt"].is_string(), "{issued}");
        let raw = ok(url, &["agents", "token", "ada", "--raw"]);
        assert_eq!(raw.lines().count(), 1, "{raw:?}");
        let token = raw.trim_end();
        assert!(!token.is_empty() && !token.contains(' '), "{raw:?}");
        // Word for word as a shell user writes it.
        let script = r#""$BIN" call ada acme.echo '{"message": "hi"}' --token "$("$BIN" agents token ada --raw)""#;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("BIN", host_binary())
            .env("CONNECTOR_HOST_URL", url)
            .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
            .env("RUST_LOG", "error")
            .output()
            .expect("sh");
        assert!(out.status.success(), "{script}: {}", stderr(&out));
        assert!(stdout(&out).contains("\"hi\""), "{}", stdout(&out));
        // An agent token does not pass as the operator's.
        let out = run(url, &["units", "list", "--token", token]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));

        // Connectors: install (summary, then --force --raw: the digest), list, get, remove.
        assert_summary(
            &ok(url, &["connectors", "install", guests::HOSTILE]),
            "connector `hostile` installed",
        );
        let digest = ok(url, &["connectors", "install", guests::HOSTILE, "--force", "--raw"]);
        assert_eq!(digest.lines().count(), 1, "{digest:?}");
        assert!(digest.starts_with("sha256:") && digest.trim_end().len() == 71, "{digest:?}");
        let described = ok_json(url, &["connectors", "get", "hostile"]);
        assert_eq!(described["digest"], digest.trim_end());
        let table = ok(url, &["connectors", "list"]);
        assert!(table.starts_with("SLUG") && table.contains("hostile"), "{table}");
        let shown = ok(url, &["connectors", "get", "acme"]);
        assert!(shown.contains("acme.echo") && shown.contains("digest:"), "{shown}");
        // Refused while bound: the hint names the flag, not the query parameter.
        ok(url, &["bind", "ops", "hostile"]);
        let out = run(url, &["connectors", "remove", "hostile"]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(err.contains("connector_in_use") && err.contains("--force"), "{err}");
        assert!(!err.contains("?force"), "{err}");
        assert_summary(
            &ok(url, &["connectors", "remove", "hostile", "--force"]),
            "connector `hostile` removed",
        );

        // Deletes and unbind print one line each; a refusal exits 1, bad usage 2.
        assert_summary(&ok(url, &["unbind", "eng", "acme"]), "unbound");
        assert_summary(&ok(url, &["agents", "delete", "bob"]), "agent `bob` deleted");
        let out = run(url, &["units", "delete", "eng"]);
        assert_eq!(out.status.code(), Some(1), "has children: {}", stderr(&out));
        assert!(stderr(&out).contains("has_children"));
        let out = run(url, &["units", "list", "--bogus"]);
        assert_eq!(out.status.code(), Some(2));
        let out = run(url, &["agents", "token", "ada", "--raw", "--json"]);
        assert_eq!(out.status.code(), Some(2), "--raw and --json exclude each other");
    })
    .await
    .unwrap();
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_follow_prints_each_message_as_it_arrives() {
    let data = tempfile::tempdir().unwrap();
    let connectors = data.path().join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm")).unwrap();
    let server = ServerProcess::start(
        data.path(),
        &[
            ("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET),
            (
                "CONNECTOR_HOST_CONNECTORS_DIR",
                connectors.to_str().unwrap(),
            ),
        ],
    )
    .await;
    let url = server.url.clone();
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        ok(&u, &["units", "put", "inbox"]);
        ok(
            &u,
            &[
                "bind",
                "inbox",
                "hostile",
                "--config",
                r#"{"routes": ["r1"]}"#,
            ],
        );
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let deliver = |id: &'static str, kind: &'static str| {
        let body = json!({"messages": [{"route": "r1", "kind": kind, "threadKey": "t-1",
                                         "payload": {"text": format!("said {kind}")}}]})
        .to_string();
        let client = client.clone();
        let url = url.clone();
        async move {
            let (s, b) = send_standard_webhook(
                &client,
                &url,
                "hostile",
                id,
                body.as_bytes(),
                SECRET,
                now_unix(),
            )
            .await
            .expect("delivered");
            assert_eq!(s, 202, "{b}");
        }
    };
    deliver("d-1", "first.kind").await;

    // The page: a table and the next cursor; --json the page itself.
    let u = url.clone();
    let (table, page) = tokio::task::spawn_blocking(move || {
        (
            ok(&u, &["messages", "inbox"]),
            ok_json(&u, &["messages", "inbox"]),
        )
    })
    .await
    .unwrap();
    assert!(
        table.contains("first.kind") && table.contains("said first.kind"),
        "{table}"
    );
    assert_eq!(page["messages"][0]["kind"], "first.kind", "{page}");

    // --follow --json: the stored message at once, then a new one as it arrives.
    let mut child = command(&url, &["messages", "inbox", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("follow");
    let (lines, seen) = std::sync::mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        let line = seen
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no line for {what} within 30 s"));
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    assert_eq!(next("the stored message")["kind"], "first.kind");
    let started = Instant::now();
    deliver("d-2", "second.kind").await;
    let live = next("the new message");
    assert_eq!(live["kind"], "second.kind", "{live}");
    assert_eq!(live["payload"]["text"], "said second.kind");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        child.try_wait().expect("status").is_none(),
        "--follow keeps running"
    );
    let _ = child.kill();
    let _ = child.wait();

    // An unknown unit is refused at once (exit 1), not followed forever.
    let u = url.clone();
    let out = tokio::task::spawn_blocking(move || run(&u, &["messages", "nope", "--follow"]))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("not_found"), "{}", stderr(&out));
}

/// `call`, `inspect` and `context` by the same rule: text a person reads by default
/// (a call's content blocks as text with its outcome on stderr, a connector's description,
/// the context's tables), the full JSON with `--json`; a failed call exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_inspect_and_context_print_text_and_json_with_the_flag() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let url = url.as_str();
        ok(url, &["connectors", "install", guests::RICH]);
        ok(url, &["units", "put", "eng"]);
        ok(url, &["agents", "put", "ada", "--unit", "eng"]);
        ok(url, &["bind", "eng", "rich"]);
        ok(
            url,
            &["bind", "eng", "acme", "--config", r#"{"greeting": "hi"}"#],
        );

        // A text block: its text alone on stdout, the outcome on stderr.
        let out = run(url, &["call", "ada", "rich.text"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(
            stdout(&out),
            "This is a simple text response for testing.\n"
        );
        assert!(
            stderr(&out).contains("ok: rich.text as agent `ada` in ")
                && stderr(&out).contains("1 content block"),
            "{}",
            stderr(&out)
        );
        // Several blocks: the text, then a line naming each other block; never base64.
        let mixed = ok(url, &["call", "ada", "rich.mixed"]);
        let lines: Vec<&str> = mixed.lines().collect();
        assert_eq!(lines[0], "Multiple content types test:", "{mixed}");
        assert!(lines[1].starts_with("[image image/png, "), "{mixed}");
        assert_eq!(
            lines[2], "[resource test://mixed-content-resource, application/octet-stream, 4 bytes]",
            "{mixed}"
        );
        let whole = ok_json(url, &["call", "ada", "rich.mixed"]);
        assert_eq!(
            whole["content"].as_array().map(Vec::len),
            Some(3),
            "{whole}"
        );
        assert_eq!(
            whole["content"][2]["resource"]["blob"], "AAEC/w==",
            "{whole}"
        );
        // A structured result without blocks: the JSON itself; --json the whole answer.
        let echoed = ok(url, &["call", "ada", "acme.echo", r#"{"message": "hi"}"#]);
        assert_eq!(
            serde_json::from_str::<Value>(&echoed).unwrap(),
            json!({"message": "hi"})
        );
        assert_eq!(
            ok_json(url, &["call", "ada", "acme.echo", r#"{"message": "hi"}"#]),
            json!({"result": {"message": "hi"}})
        );
        // A failed call: its error on stderr, nothing on stdout, exit 1.
        let out = run(url, &["call", "ada", "rich.fail", r#"{"message": "boom"}"#]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("tool_failed") && stderr(&out).contains("boom"));
        assert_eq!(stdout(&out), "");

        // inspect: the description `connectors get` shows; --json the Connector.
        let described = ok(url, &["inspect", guests::RICH]);
        assert!(
            described.starts_with("connector:     rich\n")
                && described.contains("world:         spring:connector@0.3.0")
                && described.contains("rich.mixed"),
            "{described}"
        );
        assert!(
            serde_json::from_str::<Value>(&described).is_err(),
            "{described}"
        );
        let info = ok_json(url, &["inspect", guests::RICH]);
        assert_eq!(info["slug"], "rich");
        assert!(
            info["tools"].as_array().is_some_and(|t| t.len() > 5),
            "{info}"
        );

        // context: the env vars and files as tables; --json the answer.
        let tables = ok(url, &["context", "ada"]);
        let first = tables.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("ENV") && first.contains("VALUE"),
            "{tables}"
        );
        assert!(
            tables
                .lines()
                .any(|l| l.starts_with("SPRING_CONNECTOR_ACME_GREETING") && l.ends_with(" hi")),
            "{tables}"
        );
        assert!(serde_json::from_str::<Value>(&tables).is_err(), "{tables}");
        let context = ok_json(url, &["context", "ada"]);
        assert_eq!(context["env"]["SPRING_CONNECTOR_ACME_GREETING"], "hi");
        assert!(context["files"].is_array(), "{context}");
    })
    .await
    .unwrap();
    drop(server);
}
