//! Fair share at the host's edges (CONTRACT.md §5, §12, §13), against the real binary
//! where memory or remote addresses are measured: an introspection reads at most 8 MiB of
//! an image's answer; the console's sign-in brake holds one address back and never the
//! right token; what a connector writes reaches an operator's terminal escaped, and a
//! resource URI that could run script or read local files never reaches a client.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use integration_tests::guests;
use integration_tests::harness::{
    error_code, host_binary, machine_load, send, ServerProcess, TestHost, OPERATOR_TOKEN,
};
use reqwest::Method;
use serde_json::{json, Value};

use crate::mcp::Mcp;
use crate::mcp_stateless::Stateless;

const MIB: u64 = 1024 * 1024;

/// A figure of `/proc/<pid>/status` (`VmHWM`, `VmRSS`), in bytes.
fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// A fake agent image on 127.0.0.1 whose `/a2a/tools` answer is `[` and then spaces,
/// delimited by the connection's close, streamed up to `total` bytes while the client
/// reads. It stops early when `host_pid`'s resident memory has grown by more than
/// `give_up_growth` (so a host that holds everything it reads never takes the machine's
/// memory), and records that it did. Returns its URL, the bytes sent, and whether it gave
/// up.
fn endless_image(
    total: u64,
    host_pid: u32,
    give_up_growth: u64,
) -> (String, Arc<AtomicU64>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let sent = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicBool::new(false));
    let (sent_by_server, gave_up_by_server) = (sent.clone(), gave_up.clone());
    let rss_before = proc_status(host_pid, "VmRSS");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let answer =
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n[";
            if stream.write_all(answer).is_err() {
                continue;
            }
            let chunk = vec![b' '; 256 * 1024];
            let mut written = 0u64;
            while written < total {
                if stream.write_all(&chunk).is_err() {
                    break;
                }
                written += chunk.len() as u64;
                sent_by_server.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if written.is_multiple_of(16 * MIB)
                    && proc_status(host_pid, "VmRSS").saturating_sub(rss_before) > give_up_growth
                {
                    gave_up_by_server.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }
    });
    (url, sent, gave_up)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_introspection_reads_at_most_8_mib_of_an_endless_answer() {
    let _machine = machine_load().await;
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]).await;
    let client = reqwest::Client::new();
    let api = |path: &str| format!("{}/api/v1{path}", server.url);
    let (s, b) = send(
        &client,
        Method::PUT,
        &api("/units/team"),
        Some(OPERATOR_TOKEN),
        Some(json!({})),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = send(
        &client,
        Method::PUT,
        &api("/agents/ada"),
        Some(OPERATOR_TOKEN),
        Some(json!({"units": ["team"]})),
    )
    .await;
    assert_eq!(s, 201, "{b}");

    let pid = server.child.id();
    let (image, sent, gave_up) = endless_image(2048 * MIB, pid, 512 * MIB);
    let peak_before = proc_status(pid, "VmHWM");
    let started = Instant::now();
    let (s, b) = send(
        &client,
        Method::POST,
        &api("/agents/ada/image-tools/introspect"),
        Some(OPERATOR_TOKEN),
        Some(json!({"url": image})),
    )
    .await;
    let took = started.elapsed();
    let growth = proc_status(pid, "VmHWM").saturating_sub(peak_before);
    let sent = sent.load(Ordering::Relaxed);
    eprintln!(
        "introspection of an endless answer: {s} after {took:?}; {} MiB sent; the host's peak \
         resident memory grew by {} MiB{}",
        sent / MIB,
        growth / MIB,
        if gave_up.load(Ordering::Relaxed) {
            " (the image stopped streaming at 512 MiB of growth)"
        } else {
            ""
        }
    );
    assert!(
        growth <= 64 * MIB,
        "the host's peak resident memory grew by {} MiB reading an endless answer ({} MiB sent)",
        growth / MIB,
        sent / MIB
    );
    assert_eq!((s, error_code(&b)), (502, "introspection_failed"), "{b}");
    let message = b["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("more than 8 MiB"), "{message}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

/// One console sign-in with `token` from local address `from`: (status, Retry-After in
/// seconds, how long the answer took).
async fn sign_in(base: &str, from: IpAddr, token: &str) -> (u16, Option<u64>, Duration) {
    let client = reqwest::Client::builder()
        .local_address(from)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let started = Instant::now();
    let r = client
        .post(format!("{base}/console/sign-in"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap_or_else(|e| panic!("sign-in from {from}: {e}"));
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (r.status().as_u16(), retry_after, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_brake_holds_one_address_back_and_never_the_right_token() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]).await;
    let guesser: IpAddr = "127.0.0.2".parse().expect("ip");
    let operator: IpAddr = "127.0.0.1".parse().expect("ip");

    // Guessing from 127.0.0.2 until the brake answers.
    let mut statuses = Vec::new();
    // How long a sign-in no brake holds takes on this machine now (the first guess).
    let mut unbraked = None;
    let braked = loop {
        let (s, retry_after, took) = sign_in(&server.url, guesser, "guess").await;
        unbraked.get_or_insert(took);
        statuses.push(s);
        if s != 401 {
            break (s, retry_after, took);
        }
        assert!(
            statuses.len() <= 20,
            "20 wrong tokens were never braked: {statuses:?}"
        );
    };
    assert_eq!(braked.0, 429, "{statuses:?}");
    assert!(
        statuses.len() > 5,
        "a few wrong tokens are forgiven: {statuses:?}"
    );
    assert!(
        braked.1.is_some_and(|s| s >= 1),
        "a wait to honour: {braked:?}"
    );

    // The right token from another address signs in at once; a wrong one from there
    // is answered as wrong, not braked: each address has its own brake.
    let (s, _, took) = sign_in(&server.url, operator, OPERATOR_TOKEN).await;
    assert_eq!(
        s, 303,
        "the right token from 127.0.0.1 while 127.0.0.2 is braked"
    );
    let unbraked = unbraked.expect("a first guess");
    assert!(
        took < unbraked * 3 + Duration::from_millis(500),
        "{took:?} ({unbraked:?} unbraked)"
    );
    let (s, _, _) = sign_in(&server.url, operator, "typo").await;
    assert_eq!(s, 401, "127.0.0.1 is not braked by 127.0.0.2's guesses");

    // The right token from the braked address signs in too (after its turn).
    let (s, _, took) = sign_in(&server.url, guesser, OPERATOR_TOKEN).await;
    assert_eq!(s, 303, "the right token from the braked address ({took:?})");

    // Guessing from there stays braked: its wrong tokens are forgiven one per 6 s, so
    // the next wrong one brakes it again, and the one after that waits for its turn and
    // is answered 429.
    let (s, _, _) = sign_in(&server.url, guesser, "guess").await;
    assert!(s == 401 || s == 429, "{s}");
    let (s, retry_after, took) = sign_in(&server.url, guesser, "guess").await;
    assert_eq!(s, 429, "braked again");
    assert!(retry_after.is_some_and(|s| s >= 1), "{retry_after:?}");
    assert!(
        took >= Duration::from_secs(1),
        "a wrong token from a braked address waits for its turn: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_uris_that_could_run_script_or_read_files_are_refused() {
    let h = TestHost::start().await;
    h.install(guests::RICH).await;
    h.unit("team", None).await;
    h.agent("ada", &["team"]).await;
    h.bind("team", "rich", json!({})).await;
    let token = h.agent_token("ada").await;
    let session = Mcp::open(&h.url, "ada", &token, "2025-11-25").await;
    let stateless = Stateless::new(&h.url, "ada", &token);

    for uri in [
        "https://example.com/report.pdf",
        "test://embedded",
        "mailto:ops@example.com",
    ] {
        for tool in ["rich.link_to", "rich.embed_at"] {
            let (s, b) = h.call_tool("ada", tool, json!({"uri": uri})).await;
            assert_eq!(s, 200, "{tool} {uri}: {b}");
        }
    }
    let dangerous = [
        "javascript:alert(document.cookie)",
        "JavaScript:alert(1)",
        "vbscript:msgbox(1)",
        "VBScript:msgbox(1)",
        "data:text/html,<script>alert(1)</script>",
        "Data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
        "file:///etc/passwd",
        "FILE:///C:/Windows/win.ini",
        " javascript:alert(1)",
        "java\tscript:alert(1)",
        "\u{1}javascript:alert(1)",
    ];
    let mut passed = Vec::new();
    for uri in dangerous {
        for tool in ["rich.link_to", "rich.embed_at"] {
            let (s, b) = h.call_tool("ada", tool, json!({"uri": uri})).await;
            if (s, error_code(&b)) != (502, "connector_trapped") {
                passed.push(format!("{tool} {uri:?}: {s} {b}"));
                continue;
            }
            let message = b["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("content block 0"),
                "{tool} {uri:?}: {message}"
            );
            for (era, answer) in [
                ("2025-11-25", session.call(tool, json!({"uri": uri})).await),
                (
                    "2026-07-28",
                    stateless
                        .rpc(
                            "tools/call",
                            json!({"name": tool, "arguments": {"uri": uri}}),
                        )
                        .await,
                ),
            ] {
                assert_eq!(
                    answer["result"]["isError"], true,
                    "{era} {tool} {uri:?}: {answer}"
                );
                let text = answer["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    text.starts_with("connector_trapped"),
                    "{era} {tool} {uri:?}: {answer}"
                );
            }
        }
    }
    assert!(
        passed.is_empty(),
        "dangerous URIs reached the caller:\n{}",
        passed.join("\n")
    );
}

/// Runs `connector-host` with `args` against the host at `url`.
fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(host_binary())
        .args(args)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error")
        .output()
        .expect("run connector-host")
}

/// The characters that must never reach a terminal raw from what a connector wrote: C0
/// controls (but newline and tab), DEL, C1 controls, bidi embeddings, overrides and
/// isolates.
fn raw_controls(text: &str) -> Vec<String> {
    text.chars()
        .filter(|c| {
            (c.is_control() && !matches!(c, '\n' | '\t'))
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_connector_writes_reaches_the_terminal_escaped() {
    let data = tempfile::tempdir().expect("temp dir");
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let ok = |args: &[&str]| {
            let out = cli(&url, args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out
        };
        ok(&["connectors", "install", guests::RICH]);
        ok(&["units", "put", "team"]);
        ok(&["agents", "put", "ada", "--unit", "team"]);
        ok(&["bind", "team", "rich"]);
        ok(&["bind", "team", "acme"]);

        // A connector's error text: clear the screen, retitle the window, return to the
        // line start to overwrite it, and reverse what follows.
        let hostile = "\u{1b}[2J\u{1b}]0;owned\u{7}\rerror: forged\u{202e}txt.exe\u{9b}31m";
        let args = json!({"message": hostile}).to_string();
        let out = cli(&url, &["call", "ada", "rich.fail", &args]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            raw_controls(&stderr).is_empty(),
            "raw {:?} on stderr: {stderr:?}",
            raw_controls(&stderr)
        );
        assert!(
            stderr.contains("tool_failed")
                && stderr.contains(r"\u{1b}[2J")
                && stderr.contains(r"\r"),
            "the text is shown, escaped: {stderr}"
        );

        // A result that carries such characters is printed as JSON with them escaped:
        // still the same value for a program reading it.
        let message = "a\u{7f}b\u{9b}c\u{202e}d\u{2066}e";
        let args = json!({"message": message}).to_string();
        let out = ok(&["call", "ada", "acme.echo", &args]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            raw_controls(&stdout).is_empty(),
            "raw {:?} on stdout: {stdout:?}",
            raw_controls(&stdout)
        );
        let value: Value = serde_json::from_str(&stdout).expect("JSON");
        assert_eq!(value["message"], message);
    })
    .await
    .expect("the CLI steps");
}
