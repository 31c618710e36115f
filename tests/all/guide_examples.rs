//! Every `sh` example of docs/writing-a-connector.md outside section 7 (which
//! `declarative_guide.rs` runs) runs as written, in order, as a reader would type them
//! in one terminal: `cd` stays in effect for the lines after it, and a command that stays
//! in the foreground (`dev`) passes when the line it is there for comes, and is stopped.
//! The guide's local call must print what the guide says it prints. Drift fails here.
//!
//! What differs from a reader's machine, and only this: the host is a `serve` on a free
//! port (CONNECTOR_HOST_URL) and the OCI registry the one the tests start, whose address
//! replaces the guide's `127.0.0.1:5000`; cargo keeps its intermediate files in the
//! scaffold's shared folder (`CARGO_BUILD_BUILD_DIR=target/scaffold`, where `scaffold.rs`
//! builds, so dependencies compile once) and reads crates from the local registry cache.
//! The components land where the guide says (`demo_conn/target/...`). Lines that cannot
//! run here are in [`NOT_RUN`] with the reason.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::harness::{example_shell, ServerProcess};
use integration_tests::registry::Registry;

const GUIDE: &str = include_str!("../../docs/writing-a-connector.md");

/// Lines not run, by the text they start with, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "cargo install --path host",
        "installs the binary these tests run (target/debug is first on PATH)",
    ),
    (
        "connector-host serve &",
        "the host is the test's serve on a free port (CONNECTOR_HOST_URL)",
    ),
    (
        "connector-host bind demo status_page",
        "section 4's status_page is a complete connector the reader writes from the section's \
         source; its build and calls are the `connector-testing` tests of tests/all/scaffold.rs",
    ),
    (
        "connector-host call FILE.wasm current",
        "FILE.wasm is section 4's status_page (as above) and calls a status API",
    ),
];

/// Lines that stay in the foreground, by the text they start with, and the text of the
/// line they are there for.
const FOREGROUND: &[(&str, &str)] = &[("connector-host dev ", "Hello, Ada!")];

/// The guide's `sh` blocks outside section 7, each as its logical lines (`\` joins a line
/// to the next), with the section they are in.
fn guide_lines() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut inside = false;
    let mut pending = String::new();
    for line in GUIDE.lines() {
        if !inside && line.starts_with("## ") {
            section = line.to_string();
            continue;
        }
        if !inside && line.trim() == "```sh" {
            inside = true;
            continue;
        }
        if inside && line.trim() == "```" {
            inside = false;
            continue;
        }
        if !inside || section.starts_with("## 7.") {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                let logical = std::mem::take(&mut pending);
                let logical = logical.trim();
                if !logical.is_empty() && !logical.starts_with('#') {
                    out.push((section.clone(), logical.to_string()));
                }
            }
        }
    }
    out
}

/// The JSON block after "The last command prints:" in section 1.
fn promised_output() -> serde_json::Value {
    let at = GUIDE
        .find("The last command prints:")
        .expect("the guide says what the local call prints");
    let rest = &GUIDE[at..];
    let start = rest.find("```json").expect("a json block") + "```json".len();
    let end = rest[start..].find("```").expect("the block ends") + start;
    serde_json::from_str(&rest[start..end]).expect("the promised output is JSON")
}

fn sh(dir: &Path, url: &str, line: &str) -> Command {
    example_shell(dir, url, line)
}

/// Runs a foreground line until a line of its stdout contains `expect` (within 300 s:
/// the first may build), then stops it.
fn until_line(dir: &Path, url: &str, line: &str, expect: &str) -> Result<String, String> {
    let mut child = sh(dir, url, &format!("exec {line}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sh");
    let stdout = child.stdout.take().expect("stdout");
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut seen = String::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(expect) => break Ok(l),
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(_) => break Err(format!("no line with {expect:?}; it printed:\n{seen}")),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_commands_run_as_written() {
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let registry = Registry::start().await;
    let url = server.url.clone();
    let registry_host = registry.as_ref().map(|r| r.host.clone());
    let root = home.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let lines = guide_lines();
        for (prefix, _) in NOT_RUN {
            assert!(
                lines.iter().any(|(_, l)| l.starts_with(prefix)),
                "NOT_RUN lists `{prefix}`, which the guide no longer shows"
            );
        }
        let promised = promised_output();
        let mut cwd = root.clone();
        let mut ran = 0;
        for (section, line) in &lines {
            if NOT_RUN.iter().any(|(p, _)| line.starts_with(p)) {
                continue;
            }
            if let Some(folder) = line.strip_prefix("cd ").filter(|f| !f.contains(' ')) {
                cwd = cwd.join(folder);
                assert!(
                    cwd.is_dir(),
                    "{section}: `{line}`: no folder {}",
                    cwd.display()
                );
                continue;
            }
            let line = if line.contains("127.0.0.1:5000") {
                let Some(host) = &registry_host else {
                    eprintln!("skipped (no OCI registry): {line}");
                    continue;
                };
                line.replace("127.0.0.1:5000", host)
            } else {
                line.clone()
            };
            if let Some((_, expect)) = FOREGROUND.iter().find(|(p, _)| line.starts_with(p)) {
                until_line(&cwd, &url, &line, expect).unwrap_or_else(|why| {
                    panic!("{section}: `{line}` did not get to {expect:?}: {why}")
                });
                ran += 1;
                continue;
            }
            let out = sh(&cwd, &url, &line).output().expect("run sh");
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "{section}: `{line}` failed ({}):\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if line.starts_with("connector-host call target/") {
                let printed: serde_json::Value = serde_json::from_str(&stdout)
                    .unwrap_or_else(|e| panic!("`{line}` printed no JSON ({e}): {stdout}"));
                assert_eq!(printed, promised, "`{line}` prints what the guide says");
            }
            if line.starts_with("connector-host call ada ") {
                assert!(stdout.contains("Hello, Ada!"), "`{line}`: {stdout}");
            }
            ran += 1;
        }
        assert!(ran >= 14, "only {ran} of the guide's lines ran");
    })
    .await
    .unwrap();
    drop(server);
    drop(registry);
}
