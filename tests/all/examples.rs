//! Every example the command line shows (`connector-host --help` and every command's
//! `--help`) and the README's "Using the host" block runs as written, with `sh`, against
//! a fresh `connector-host serve` with the bundled connectors (CONTRACT §13). An example
//! that changes or a new one is run too: drift fails here.
//!
//! Placeholders are files of those very names in the directory the examples run in
//! (`FILE.wasm` is the bundled `acme` component, `BINDING.json` a binding config), and
//! `DIR` a folder there, so the text runs unchanged. Before the examples, one command
//! creates the units and the agent they refer to. Examples that cannot run against a
//! local host in a test (they start servers, stay in the foreground, build crates or
//! need GitHub or a registry) are listed in [`NOT_RUN`] with the reason; each of them
//! must still be shown by some `--help`, so the list cannot go stale.

use std::path::Path;
use std::process::Command;

use integration_tests::harness::{host_binary, ServerProcess, OPERATOR_TOKEN};

const README: &str = include_str!("../../README.md");

/// Examples not run, by the text they start with, and why.
const NOT_RUN: &[(&str, &str)] = &[
    ("connector-host serve", "starts a server in the foreground"),
    ("CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET=", "starts a server"),
    ("connector-host dev ", "watches a file in the foreground"),
    (
        "connector-host new ",
        "builds a new crate (tests/all/scaffold.rs runs it)",
    ),
    (
        "connector-host mcp ",
        "serves MCP on stdin/stdout (tests/all/mcp_local.rs runs it)",
    ),
    ("CONNECTOR_HOST_AGENT_TOKEN=", "serves MCP on stdin/stdout"),
    (
        "connector-host pack ",
        "needs the manifest it names (tests/all/declarative_guide.rs runs the guide's)",
    ),
    (
        "connector-host push ",
        "needs an OCI registry (tests/all/oci.rs)",
    ),
    (
        "connector-host keygen",
        "asks for a password (tests/all/oci.rs)",
    ),
    (
        "connector-host connectors install oci://",
        "needs an OCI registry (tests/all/oci.rs)",
    ),
    (
        "connector-host messages engineering --follow",
        "follows until interrupted (tests/all/cli_output.rs)",
    ),
    (
        "connector-host audit --since 2026-01-01T00:00:00Z --follow",
        "follows until interrupted",
    ),
    (
        "connector-host call FILE.wasm get_issue",
        "calls api.github.com (tests/all/cli.rs runs it without GitHub)",
    ),
    (
        "connector-host call FILE.wasm fetch",
        "needs a component with a fetch tool and a server",
    ),
];

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

fn sh(dir: &Path, url: &str, line: &str) -> std::process::Output {
    let bin_dir = host_binary().parent().expect("bin dir").to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .arg("-c")
        .arg(line)
        .current_dir(dir)
        .env("PATH", path)
        .env("CONNECTOR_HOST_URL", url)
        .env("CONNECTOR_HOST_OPERATOR_TOKEN", OPERATOR_TOKEN)
        .env("RUST_LOG", "error")
        .output()
        .expect("run sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_as_written() {
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(data.path(), &[]).await;
    let url = server.url.clone();
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("FILE.wasm"),
            connector_bundled::component("acme").expect("bundled acme"),
        )
        .unwrap();
        std::fs::write(d.join("BINDING.json"), r#"{"repo": "octo/hello"}"#).unwrap();
        std::fs::create_dir(d.join("DIR")).unwrap();
        // What the examples refer to without creating it first.
        for setup in [
            "connector-host units put acme-corp",
            "connector-host units put engineering --parent acme-corp",
            "connector-host units put research",
            "connector-host agents put ada --unit engineering",
        ] {
            let out = sh(d, &url, setup);
            assert!(
                out.status.success(),
                "{setup}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        let helps = help_examples();
        for (prefix, _) in NOT_RUN {
            assert!(
                helps.iter().any(|l| l.starts_with(prefix)),
                "NOT_RUN lists `{prefix}`, which no --help shows any more"
            );
        }
        let mut ran = 0;
        for line in helps.iter().chain(readme_examples().iter()) {
            if NOT_RUN.iter().any(|(p, _)| line.starts_with(p)) {
                continue;
            }
            let out = sh(d, &url, line);
            assert!(
                out.status.success(),
                "the example `{line}` failed ({}):\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
        assert!(ran >= 30, "only {ran} examples ran");
        // What the examples did is there: `context ada --write-files DIR` wrote the
        // files of the connectors bound above ada's unit.
        assert!(
            d.join("DIR/.spring/connectors").is_dir(),
            "context --write-files DIR wrote nothing"
        );
    })
    .await
    .unwrap();
}
