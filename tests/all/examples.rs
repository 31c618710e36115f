//! Every example the command line shows (`connector-host --help` and every command's
//! `--help`) and the README's "Using the host" block runs as written, with `sh`, against
//! a fresh `connector-host serve` with the bundled connectors (CONTRACT §13). An example
//! that changes or a new one is run too: drift fails here.
//!
//! Placeholders are files of those very names in the directory the examples run in
//! (`FILE.wasm` is the bundled `acme` component, written again before every example,
//! `MANIFEST.yaml` and the manifests `pack` names are declarative manifests,
//! `BINDING.json` a binding config), and `DIR` a folder there, so the text runs
//! unchanged. In an `oci://` reference `REGISTRY` is the OCI registry the test starts
//! (the one `tests/all/oci.rs` uses), `REPOSITORY:TAG` what the push example published
//! and `DIGEST` the digest it printed; `~` is the examples' folder (`HOME`). `new`
//! builds its crate as it would anywhere, keeping cargo's intermediate files in the
//! scaffold tests' folder (`CARGO_BUILD_BUILD_DIR`). Before the
//! examples, a few commands create the units, the agent and the message they refer to.
//! Examples that run until interrupted ([`FOREGROUND`]: `--follow`, `mcp`, `dev`) pass
//! when their first line comes, and are then stopped. Examples that cannot run here are
//! listed in [`NOT_RUN`] with the reason; each of them must still be shown by some
//! `--help`, so the list cannot go stale.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::guests;
use integration_tests::harness::{
    example_shell, host_binary, now_unix, send_standard_webhook, ServerProcess,
};
use integration_tests::registry::Registry;

const README: &str = include_str!("../../README.md");

/// Examples not run, by the text they start with, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "connector-host serve --config /etc/connector-host/host.toml",
        "reads /etc/connector-host/host.toml, a system file the test cannot own (the bare \
         `connector-host serve` example runs)",
    ),
    (
        "CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET=",
        "keeps its data in /var/lib/connector-host, a system folder the test cannot own (the \
         bare `connector-host serve` example runs)",
    ),
    (
        "connector-host dev COMPONENT",
        "COMPONENT is the component `new` builds (tests/all/scaffold.rs runs this loop)",
    ),
    (
        "connector-host mcp --agent ada --data-dir /var/lib/connector-host",
        "reads a system folder the test cannot own (the same local server runs from ./data \
         in the example before it)",
    ),
    (
        "connector-host mcp --agent ada --url http://127.0.0.1:8787",
        "names the default address, 127.0.0.1:8787, where no test host listens (the bridge \
         runs in tests/all/mcp_local.rs)",
    ),
    (
        "CONNECTOR_HOST_AGENT_TOKEN=...",
        "`...` stands for an agent token (the bridge runs in tests/all/mcp_local.rs)",
    ),
    (
        "connector-host pack remote.yaml --mcp-url http://127.0.0.1:8000/mcp",
        "lists the tools of an MCP server at a fixed address, 127.0.0.1:8000 \
         (tests/all/declarative.rs packs against a real MCP server)",
    ),
    (
        "connector-host push FILE.wasm oci://ghcr.io/",
        "publishes to ghcr.io, which tests cannot reach",
    ),
    (
        "connector-host call FILE.wasm get_issue",
        "calls api.github.com (tests/all/cli.rs runs it without GitHub)",
    ),
    (
        "connector-host call FILE.wasm fetch",
        "needs a component with a fetch tool and a server on 127.0.0.1:8080",
    ),
];

/// The `initialize` request an `mcp` example answers first.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"examples","version":"0"}}}"#;

/// Examples that run until interrupted, by the text they start with, with what they read
/// on stdin and what their first line must contain.
const FOREGROUND: &[(&str, &str, &str)] = &[
    (
        "connector-host messages engineering --follow",
        "",
        "said hello",
    ),
    // The table's header comes with the first records.
    ("connector-host audit --since", "", "ACTION"),
    (
        "connector-host mcp --agent ada --local",
        INITIALIZE,
        r#""result""#,
    ),
    ("connector-host dev FILE.wasm", "", "loaded"),
    // On the default address, 127.0.0.1:8787, which no test holds; it says where it
    // listens on stderr (see `ON_STDERR`).
    (
        "connector-host serve",
        "",
        "connector-host listening on http://127.0.0.1:8787",
    ),
];

/// Foreground examples whose first line is on stderr: `serve` keeps stdout for nothing.
const ON_STDERR: &[&str] = &["connector-host serve"];

/// The manifests `pack` examples name: the examples folder's `github-pr` (also as
/// `MANIFEST.yaml`), and two small ones.
const MANIFESTS: &[(&str, &str)] = &[
    (
        "MANIFEST.yaml",
        include_str!("../../connectors/examples/github-pr.yaml"),
    ),
    (
        "github-pr.yaml",
        include_str!("../../connectors/examples/github-pr.yaml"),
    ),
    (
        "tools/weather.yaml",
        r#"kind: "commonagents.info/v1beta2/tool"
namespace: "weather"
name: "weather"
description: "The weather in a city."
actions:
  - name: now
    description: "Current weather in a city."
    parameters:
      properties:
        city: { type: string }
    execute:
      stateless_http:
        method: GET
        url: "https://api.weather.example.com/now?city={parameters.city}"
"#,
    ),
    (
        "crm.yaml",
        r#"kind: "commonagents.info/v1beta2/tool"
namespace: "crm"
name: "crm"
description: "Contacts in the CRM."
settings:
  properties:
    api_url:
      type: string
      description: "The CRM's base URL."
actions:
  - name: find_contact
    description: "Finds a contact by name."
    parameters:
      properties:
        name: { type: string }
    execute:
      stateless_http:
        method: GET
        url: "{settings.api_url}/contacts?name={parameters.name}"
"#,
    ),
];

/// The webhook secret of the `hostile` test connector, which delivers the message the
/// `messages` examples read.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Where the push example publishes (`REPOSITORY:TAG` in the install examples).
const PUSHED: &str = "acme/echo:v1";

/// The `connector-host` lines of `text` (indented, as help texts show them).
fn example_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        // A usage line's second form (`connector-host audit <COMMAND>`) is syntax, not an
        // example.
        .filter(|l| !l.contains(" <COMMAND>"))
        .filter(|l| {
            l.starts_with("connector-host ")
                // `VAR=value connector-host ...`; prose about variables is not an example.
                || (l.starts_with("CONNECTOR_HOST_")
                    && l.split_whitespace().nth(1) == Some("connector-host"))
        })
        .map(str::to_string)
        .collect()
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if inside {
            if line.trim().is_empty() || !line.starts_with("  ") {
                break;
            }
            // A description that wrapped is indented further.
            if line.starts_with("   ") {
                continue;
            }
            if let Some(name) = line.split_whitespace().next() {
                if name != "help" {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

fn help(args: &[&str]) -> String {
    let out = Command::new(host_binary())
        .args(args)
        .arg("--help")
        .output()
        .expect("run connector-host");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every example of every `--help`, in the order the commands list them, once each.
fn help_examples() -> Vec<String> {
    let mut found = Vec::new();
    let top = help(&[]);
    found.extend(example_lines(&top));
    for command in subcommands(&top) {
        let text = help(&[&command]);
        found.extend(example_lines(&text));
        for sub in subcommands(&text) {
            found.extend(example_lines(&help(&[&command, &sub])));
        }
    }
    let mut seen = std::collections::HashSet::new();
    found.retain(|l| seen.insert(l.clone()));
    found
}

/// The README's "Using the host" block.
fn readme_examples() -> Vec<String> {
    let start = README
        .find("## Using the host")
        .expect("README has Using the host");
    let section = &README[start..];
    let block = section.find("```sh").expect("a sh block") + "```sh".len();
    let end = section[block..].find("```").expect("the block ends") + block;
    example_lines(&section[block..end])
}

/// `$VAR`, else `$HOME/<folder>`: where a tool keeps its home before HOME is changed.
fn tool_home(var: &str, folder: &str) -> std::path::PathBuf {
    std::env::var_os(var).map_or_else(
        || Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(folder),
        std::path::PathBuf::from,
    )
}

/// `sh -c LINE` in `dir` (see [`example_shell`]), with `dir` as HOME.
fn sh_command(dir: &Path, url: &str, line: &str) -> Command {
    let mut cmd = example_shell(dir, url, line);
    cmd.env("HOME", dir)
        // rustup and cargo keep their homes (toolchains, the registry cache) under the
        // real HOME.
        .env("RUSTUP_HOME", tool_home("RUSTUP_HOME", ".rustup"))
        .env("CARGO_HOME", tool_home("CARGO_HOME", ".cargo"));
    cmd
}

fn sh(dir: &Path, url: &str, line: &str) -> std::process::Output {
    sh_command(dir, url, line).output().expect("run sh")
}

/// Runs an example that stays in the foreground (`exec`, so stopping it stops the
/// command), writes `input` to its stdin, and returns its first line of stdout (of stderr
/// with `on_stderr`), or why there was none within 60 s. It is stopped then.
fn first_line(
    dir: &Path,
    url: &str,
    line: &str,
    input: &str,
    on_stderr: bool,
) -> Result<String, String> {
    let mut child = sh_command(dir, url, &format!("exec {line}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sh");
    let mut stdin = child.stdin.take().expect("stdin");
    if !input.is_empty() {
        writeln!(stdin, "{input}").expect("write stdin");
    }
    let read: Box<dyn std::io::Read + Send> = if on_stderr {
        Box::new(child.stderr.take().expect("stderr"))
    } else {
        Box::new(child.stdout.take().expect("stdout"))
    };
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(read).read_line(&mut first);
        let _ = send.send(first);
    });
    let first = lines.recv_timeout(Duration::from_secs(60));
    let exited = child.try_wait().expect("status");
    let _ = child.kill();
    let status = child.wait().expect("wait");
    drop(stdin);
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    match first {
        Ok(first) if !first.is_empty() && exited.is_none_or(|s| s.success()) => Ok(first),
        Ok(_) => Err(format!(
            "it ended ({status}) without a line; stderr: {stderr}"
        )),
        Err(_) => Err(format!("no line within 60 s; stderr: {stderr}")),
    }
}

/// `line` with its OCI placeholders filled in (see the module docs).
fn with_registry(line: &str, registry: &str, digest: &str) -> String {
    line.replace("oci://REGISTRY/", &format!("oci://{registry}/"))
        .replace("REPOSITORY:TAG", PUSHED)
        .replace(
            "REPOSITORY@sha256:DIGEST",
            &format!("{}@{digest}", PUSHED.split(':').next().unwrap_or(PUSHED)),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    // The host keeps its data in ./data of the examples' folder, where `mcp --local`
    // finds it; the `hostile` test connector delivers webhooks to units.
    let connectors = dir.path().join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    std::fs::copy(guests::HOSTILE, connectors.join("hostile.wasm")).unwrap();
    let server = ServerProcess::start(
        &d.join("data"),
        &[
            ("CONNECTOR_HOST_HOSTILE_WEBHOOK_SECRET", SECRET),
            (
                "CONNECTOR_HOST_CONNECTORS_DIR",
                connectors.to_str().unwrap(),
            ),
        ],
    )
    .await;
    let registry = Registry::start().await;
    let url = server.url.clone();

    let (u, folder) = (url.clone(), d.clone());
    tokio::task::spawn_blocking(move || {
        let d = folder.as_path();
        std::fs::write(d.join("BINDING.json"), r#"{"repo": "octo/hello"}"#).unwrap();
        std::fs::create_dir(d.join("DIR")).unwrap();
        for (name, text) in MANIFESTS {
            let path = d.join(name);
            std::fs::create_dir_all(path.parent().expect("a folder")).unwrap();
            std::fs::write(path, text).unwrap();
        }
        // What the examples refer to without creating it first.
        for setup in [
            "connector-host units put acme-corp",
            "connector-host units put engineering --parent acme-corp",
            "connector-host units put research",
            "connector-host agents put ada --unit engineering",
            r#"connector-host bind engineering hostile --config '{"routes": ["r1"]}'"#,
        ] {
            let out = sh(d, &u, setup);
            assert!(
                out.status.success(),
                "{setup}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    })
    .await
    .unwrap();
    // One message in engineering's inbox, for `messages` to show.
    let body = r#"{"messages": [{"route": "r1", "kind": "note.said", "threadKey": "t-1", "payload": {"text": "said hello"}}]}"#;
    let (status, answer) = send_standard_webhook(
        &reqwest::Client::new(),
        &url,
        "hostile",
        "m-1",
        body.as_bytes(),
        SECRET,
        now_unix(),
    )
    .await
    .expect("delivered");
    assert_eq!(status, 202, "{answer}");

    let registry_host = registry.as_ref().map(|r| r.host.clone());
    tokio::task::spawn_blocking(move || {
        let d = d.as_path();
        let acme = connector_bundled::component("acme").expect("bundled acme");
        let helps = help_examples();
        for (prefix, _) in NOT_RUN {
            assert!(
                helps.iter().any(|l| l.starts_with(prefix)),
                "NOT_RUN lists `{prefix}`, which no --help shows any more"
            );
        }
        for (prefix, _, _) in FOREGROUND {
            assert!(
                helps.iter().any(|l| l.starts_with(prefix)),
                "FOREGROUND lists `{prefix}`, which no --help shows any more"
            );
        }
        let mut ran = 0;
        let mut digest = String::new();
        for line in helps.iter().chain(readme_examples().iter()) {
            if NOT_RUN.iter().any(|(p, _)| line.starts_with(p)) {
                continue;
            }
            let line = if line.contains("oci://REGISTRY/") {
                let Some(host) = &registry_host else {
                    eprintln!("skipped (no OCI registry): {line}");
                    continue;
                };
                with_registry(line, host, &digest)
            } else {
                line.clone()
            };
            // Every example starts from the same placeholder component.
            std::fs::write(d.join("FILE.wasm"), acme).unwrap();
            if let Some((_, input, expect)) =
                FOREGROUND.iter().find(|(p, _, _)| line.starts_with(p))
            {
                let on_stderr = ON_STDERR.iter().any(|p| line.starts_with(p));
                if on_stderr && std::net::TcpListener::bind("127.0.0.1:8787").is_err() {
                    integration_tests::harness::skip_or_fail::<()>(
                        &format!("the example `{line}`"),
                        "127.0.0.1:8787, its default address, is taken on this machine",
                    );
                    continue;
                }
                let first = first_line(d, &url, &line, input, on_stderr)
                    .unwrap_or_else(|why| panic!("the example `{line}` failed: {why}"));
                assert!(
                    first.contains(expect),
                    "the example `{line}` printed first {first:?}, without {expect:?}"
                );
                ran += 1;
                continue;
            }
            let out = sh(d, &url, &line);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "the example `{line}` failed ({}):\nstdout: {stdout}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            if line.starts_with("connector-host push ") {
                // The pinned reference it printed: oci://…@sha256:<64 hex digits>.
                digest = stdout
                    .split_once("@sha256:")
                    .and_then(|(_, rest)| rest.get(..64))
                    .map(|hex| format!("sha256:{hex}"))
                    .unwrap_or_else(|| panic!("`{line}` printed no pinned reference: {stdout}"));
            }
            ran += 1;
        }
        assert!(ran >= 40, "only {ran} examples ran");
        // What the examples did is there: `context ada --write-files DIR` wrote the
        // files of the connectors bound above ada's unit; keygen and pack wrote theirs.
        assert!(
            d.join("DIR/.spring/connectors").is_dir(),
            "context --write-files DIR wrote nothing"
        );
        for written in [
            "cosign.key",
            "cosign.pub",
            "release.key",
            "release.pub",
            "github-pr.wasm",
            "build/weather.wasm",
            "crm.wasm",
            "weather/target/wasm32-wasip2/release/weather.wasm",
            "src/acme-crm/target/wasm32-wasip2/release/acme_crm.wasm",
        ] {
            assert!(d.join(written).is_file(), "no {written}");
        }
    })
    .await
    .unwrap();
    drop(server);
    drop(registry);
}
