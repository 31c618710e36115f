//! Every `sh` example of docs/writing-a-connector.md outside section 7 (which
//! `declarative_guide.rs` runs) runs as written, in order, as a reader would type them
//! in one terminal: `cd` and `export` stay in effect for the lines after them,
//! `connector-host serve &` keeps running in the background, and a command that stays in
//! the foreground (`dev`) passes when the line it is there for comes, and is stopped. The
//! guide's local call must print what the guide says it prints. Drift fails here.
//!
//! The reader's machine is a private network namespace (`integration_tests::namespaces`):
//! the host the guide starts listens on the default address, where every command finds
//! it, and the OCI registry the tests start is at the guide's `127.0.0.1:5000`. Nothing
//! else is reachable, so neither is the status API that section 4's `current` calls: that
//! call must get as far as looking up status.example.com. Without namespaces (not root) the
//! test is skipped, and under CI=true it fails.
//!
//! Section 4's connector is what the guide says it is: its `src/lib.rs` block in a crate
//! `connector-host new status_page` made, built and installed before the section's first
//! command; it is the section's `FILE.wasm`, and `token.txt` holds a token. What else
//! differs from a reader's machine: cargo keeps its intermediate files in the scaffold's
//! shared folder (`CARGO_BUILD_BUILD_DIR=target/scaffold`, where `scaffold.rs` builds, so
//! dependencies compile once) and reads crates from the local registry cache. Lines that
//! cannot run here are in [`NOT_RUN`] with the reason.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use integration_tests::docs::{commands, export, fenced, transcript};
use integration_tests::harness::{example_shell, skip_or_fail, Foreground};
use integration_tests::namespaces::Namespaces;
use integration_tests::registry::Registry;

const GUIDE: &str = include_str!("../../docs/writing-a-connector.md");

/// Lines not run, by the text they start with, and why.
const NOT_RUN: &[(&str, &str)] = &[(
    "cargo install --path host",
    "installs a release build of the binary (most of an hour on a CI runner); the one this \
     `cargo test` built is first on PATH",
)];

/// Lines that stay in the foreground or in the background (`&`), by the text they start
/// with, and the text of the line (stdout or stderr) they are there for.
const RUNNING: &[(&str, &str)] = &[
    ("connector-host dev ", "Hello, Ada!"),
    (
        "connector-host serve &",
        "connector-host listening on http://127.0.0.1:8787",
    ),
];

/// The commands of the guide's `sh` blocks outside section 7, in order, with the section
/// they are in.
fn guide_lines() -> Vec<(String, String)> {
    fenced(GUIDE, "sh")
        .into_iter()
        .filter(|block| !block.section.starts_with("## 7."))
        .flat_map(|block| {
            commands(&block.text)
                .into_iter()
                .map(move |line| (block.section.clone(), line))
        })
        .collect()
}

/// The first fenced block of `lang` after `marker`.
fn block_after(marker: &str, lang: &str) -> String {
    let at = GUIDE
        .find(marker)
        .unwrap_or_else(|| panic!("the guide has {marker:?}"));
    fenced(&GUIDE[at..], lang)
        .into_iter()
        .next()
        .map(|block| block.text)
        .unwrap_or_else(|| panic!("a {lang} block after {marker:?}"))
}

/// The JSON block after "The last command prints:" in section 1.
fn promised_output() -> serde_json::Value {
    serde_json::from_str(&block_after("The last command prints:", "json"))
        .expect("the promised output is JSON")
}

/// The reader's terminal: the folder it is in, the variables it exported, the machine.
struct Terminal {
    cwd: PathBuf,
    exported: Vec<(String, String)>,
    ns: Namespaces,
}

impl Terminal {
    /// `sh -c LINE` here, as the reader's shell runs it: no host URL or token set but what
    /// the guide exported.
    fn sh(&self, line: &str) -> Command {
        self.sh_in(&self.cwd, line)
    }

    /// [`Self::sh`] in `dir`.
    fn sh_in(&self, dir: &Path, line: &str) -> Command {
        let mut cmd = example_shell(dir, "", line);
        cmd.env_remove("CONNECTOR_HOST_URL")
            .env_remove("CONNECTOR_HOST_OPERATOR_TOKEN")
            .envs(self.exported.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        self.ns.enter(&mut cmd);
        cmd
    }

    /// Runs `line` to its end; its stdout, after asserting it succeeded.
    fn run(&self, section: &str, line: &str) -> String {
        let out = self.sh(line).output().expect("run sh");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{section}: `{line}` failed ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// `export NAME=VALUE`: the value as the shell expands it, kept for the lines after.
    fn export(&mut self, section: &str, line: &str) {
        let (name, script) = export(line).expect("an export line");
        let value = self.run(section, &script);
        self.exported.push((name, value));
    }
}

/// Section 4's connector, as the guide says to make it: `connector-host new status_page`
/// (in `root`), the section's `src/lib.rs`, built and installed into the running host. Its
/// component.
fn status_page(terminal: &Terminal, root: &Path) -> PathBuf {
    let crate_dir = root.join("status_page");
    for (dir, step) in [
        (root, "connector-host new status_page --no-build"),
        (&crate_dir, "cargo build --target wasm32-wasip2 --release"),
        (
            &crate_dir,
            "connector-host connectors install target/wasm32-wasip2/release/status_page.wasm",
        ),
    ] {
        if step.starts_with("cargo build") {
            std::fs::write(
                crate_dir.join("src/lib.rs"),
                block_after("## 4. A complete connector", "rust"),
            )
            .unwrap();
        }
        let out = terminal.sh_in(dir, step).output().expect("run sh");
        assert!(
            out.status.success(),
            "section 4's connector: `{step}` failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    crate_dir.join("target/wasm32-wasip2/release/status_page.wasm")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guides_commands_run_as_written() {
    let mut ns = match Namespaces::new(&[]) {
        Ok(ns) => ns,
        Err(why) => {
            skip_or_fail::<()>("the guide's commands (a private network namespace)", &why);
            return;
        }
    };
    let Some(registry) = Registry::start().await else {
        return;
    };
    ns.forward(
        "127.0.0.1:5000",
        registry.host.parse().expect("the registry's address"),
    );
    let home = tempfile::tempdir().unwrap();
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
        let mut terminal = Terminal {
            cwd: root.clone(),
            exported: Vec::new(),
            ns,
        };
        let mut background = Vec::new();
        let mut status_page_wasm = None;
        let mut ran = 0;
        for (section, line) in &lines {
            if NOT_RUN.iter().any(|(p, _)| line.starts_with(p)) {
                continue;
            }
            ran += 1;
            if let Some(folder) = line.strip_prefix("cd ").filter(|f| !f.contains(' ')) {
                terminal.cwd = terminal.cwd.join(folder);
                assert!(
                    terminal.cwd.is_dir(),
                    "{section}: `{line}`: no folder {}",
                    terminal.cwd.display()
                );
                continue;
            }
            if export(line).is_some() {
                terminal.export(section, line);
                continue;
            }
            if line.contains("status_page") && status_page_wasm.is_none() {
                status_page_wasm = Some(status_page(&terminal, &root));
            }
            if line.starts_with("connector-host call FILE.wasm current") {
                let wasm = status_page_wasm.as_ref().expect("section 4's connector");
                std::fs::copy(wasm, terminal.cwd.join("FILE.wasm")).unwrap();
                std::fs::write(terminal.cwd.join("token.txt"), "status-token-1\n").unwrap();
                let out = terminal.sh(line).output().expect("run sh");
                let stderr = String::from_utf8_lossy(&out.stderr);
                // Everything before the request passed (the config, the secret it names):
                // it ends looking up status.example.com, the one host the connector may
                // reach, which is out of reach here.
                assert_eq!(out.status.code(), Some(1), "{section}: `{line}`: {stderr}");
                assert!(
                    stderr.contains("tool_failed: HTTP request failed")
                        && stderr.contains("DnsError"),
                    "{section}: `{line}` did not end at looking up status.example.com: {stderr}"
                );
                assert!(
                    !stderr.contains("no apiToken and no tokenSecret"),
                    "{section}: `{line}` had no token: {stderr}"
                );
                continue;
            }
            if let Some((_, expect)) = RUNNING.iter().find(|(p, _)| line.starts_with(p)) {
                let mut running = Foreground::start(terminal.sh(line), "");
                running
                    .until(expect, Duration::from_secs(300))
                    .unwrap_or_else(|why| {
                        panic!("{section}: `{line}` did not get to {expect:?}: {why}")
                    });
                if line.contains(" &") {
                    background.push(running);
                }
                continue;
            }
            let stdout = terminal.run(section, line);
            if line.starts_with("connector-host call target/") {
                let printed: serde_json::Value = serde_json::from_str(&stdout)
                    .unwrap_or_else(|e| panic!("`{line}` printed no JSON ({e}): {stdout}"));
                assert_eq!(printed, promised, "`{line}` prints what the guide says");
            }
            if line.starts_with("connector-host call ada ") {
                assert!(stdout.contains("Hello, Ada!"), "`{line}`: {stdout}");
            }
        }
        assert!(ran >= 20, "only {ran} of the guide's lines ran");
        assert!(
            status_page_wasm.is_some(),
            "section 4's connector was never needed"
        );
        drop(background);
    })
    .await
    .unwrap();
    drop(registry);
}

/// The guide's transcripts (blocks of `$ connector-host ...` lines, each followed by what
/// it prints) print exactly that: "the real outputs for the test guests in
/// `target/guests/components/`", run there.
#[test]
fn the_guides_transcripts_are_what_the_commands_print() {
    let guests = Path::new(integration_tests::guests::HOSTILE)
        .parent()
        .expect("the test guests' folder");
    let transcripts: Vec<(String, String)> = fenced(GUIDE, "")
        .iter()
        .flat_map(|block| transcript(&block.text))
        .collect();
    assert!(
        transcripts.len() >= 7,
        "the guide's transcripts: {transcripts:?}"
    );
    for (command, shown) in &transcripts {
        let out = example_shell(guests, "", command)
            .stdin(Stdio::null())
            .output()
            .expect("run sh");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            printed.trim_end(),
            shown.trim_end(),
            "`$ {command}` prints something else than the guide shows"
        );
    }
}
