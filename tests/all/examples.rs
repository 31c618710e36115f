//! Every example the command line shows (`connector-host --help` and every command's
//! `--help`), every `sh` block of the README and of connectors/examples/README.md runs as
//! written, with `sh`, against a fresh `connector-host serve` with the bundled connectors
//! (CONTRACT §13). An example that changes or a new one is run too: drift fails here.
//!
//! Placeholders are files of those very names in the directory an example runs in
//! (`FILE.wasm` and `COMPONENT` a component that has the tool the example names, written
//! again before every example: see [`COMPONENTS`]; `MANIFEST.yaml` and the manifests
//! `pack` names are declarative manifests, `BINDING.json` a binding config, `token.txt` a
//! token), and `DIR` a folder there, so the text runs unchanged. In an `oci://` reference
//! `REGISTRY` is an OCI registry the test starts (the one `tests/all/oci.rs` uses; for
//! `--username USER` one behind those credentials, the password in the variable the
//! example names), `REPOSITORY:TAG` and `DIGEST` what the first push to it published, and
//! `HEX` the digest the latest push printed; `~` is the examples' folder (`HOME`) and
//! `$REPO` this checkout. `new` builds its crate as it would anywhere, keeping cargo's
//! intermediate files in the scaffold tests' folder (`CARGO_BUILD_BUILD_DIR`). Before the
//! examples, a few commands create the units, the agent and the message they refer to.
//!
//! The README's blocks run in order, as in one terminal: a block goes on in the folder the
//! one before it ended in (a block with a here-document runs as one script, `cd` and all),
//! and what a block `export`s holds for the rest of it.
//!
//! Examples that need a machine of their own ([`MACHINES`]: a fixed address such as
//! 127.0.0.1:8787, a system folder such as /etc/connector-host, a server at a fixed
//! address, or no way out to the Internet) run in private network and mount namespaces
//! (`integration_tests::namespaces`) that provide exactly that, without touching this
//! machine; where namespaces cannot be made (no root) they are skipped with one SKIPPED
//! line, and under CI=true they fail. Examples that run until interrupted ([`FOREGROUND`])
//! pass when the line they are there for comes, and are then stopped; some must print
//! what [`PRINTS`] says. Examples that cannot run are listed in [`NOT_RUN`] with the
//! reason. Every entry of these tables must still match an example, so none goes stale.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::docs::{commands, export, fenced};
use integration_tests::guests;
use integration_tests::harness::{
    example_shell, host_binary, now_unix, send_standard_webhook, skip_or_fail, Foreground,
    ServerProcess,
};
use integration_tests::namespaces::Namespaces;
use integration_tests::otlp::Receiver;
use integration_tests::registry::Registry;

const README: &str = include_str!("../../README.md");

/// Examples not run, by the text they start with, and why.
const NOT_RUN: &[(&str, &str)] = &[
    (
        "cargo run --release -p connector-host -- serve",
        "builds the host in release mode (most of an hour on a CI runner); the debug build's \
         `connector-host serve` runs as written (the `serve --help` example)",
    ),
    (
        "cargo test --workspace",
        "is the suite this test belongs to; the test checks that .ci/run ends with it",
    ),
    (
        "sudo -u postgres",
        "makes a role and a database as the `postgres` user of the machine's own PostgreSQL \
         (sudo, a password typed twice); the test makes the same role (password PASSWORD) and \
         database with psql on the tests' PostgreSQL, and the rest of the block runs as written",
    ),
];

/// What `FILE.wasm` (and `COMPONENT`) is in an example, by the text it starts with: a
/// component with the tool the example names. Any other example gets the bundled `acme`.
const COMPONENTS: &[(&str, Component)] = &[
    ("connector-host call FILE.wasm get_issue", Component::GitHub),
    ("connector-host call FILE.wasm fetch", Component::Fetch),
    ("connector-host dev FILE.wasm", Component::Scaffolded),
    ("connector-host dev COMPONENT", Component::Scaffolded),
];

#[derive(Clone, Copy, Debug)]
enum Component {
    /// The bundled `acme` (`echo`, `timestamp`).
    Acme,
    /// The bundled `github` (`get_issue`, with a token from a secret `patSecret` names).
    GitHub,
    /// The `hostile` test guest: `fetch {url}` GETs a URL.
    Fetch,
    /// What `connector-host new` builds: the scaffold's `hello {name}`.
    Scaffolded,
}

/// Examples that need a machine of their own, by the text they start with (the first
/// match counts), and what it holds.
const MACHINES: &[(&str, Machine)] = &[
    (
        "connector-host serve --config /etc/connector-host/host.toml",
        Machine::SystemConfig,
    ),
    (
        "CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET=",
        Machine::SystemDataDir,
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 connector-host serve",
        Machine::TraceCollector,
    ),
    (
        "connector-host serve --listen 0.0.0.0:8787 --data-dir /var/lib/connector-host",
        Machine::Replica,
    ),
    ("connector-host serve", Machine::FreeAddress),
    (
        "connector-host mcp --agent ada --data-dir /var/lib/connector-host",
        Machine::HostDataInSystemDir,
    ),
    (
        "connector-host mcp --agent ada --url http://127.0.0.1:8787",
        Machine::HostAtDefaultAddress,
    ),
    (
        "connector-host pack remote.yaml --mcp-url http://127.0.0.1:8000/mcp",
        Machine::McpServer,
    ),
    (
        "connector-host call FILE.wasm fetch '{\"url\": \"http://127.0.0.1:8080\"}'",
        Machine::HttpServer,
    ),
    ("connector-host call FILE.wasm get_issue", Machine::Offline),
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Machine {
    /// Listens on a fixed address (127.0.0.1:8787, 0.0.0.0:8787): a network of its own,
    /// where it is free. A `serve` starts in an empty folder, as on a new machine.
    FreeAddress,
    /// Reads /etc/connector-host/host.toml: an /etc of its own holding the README's
    /// configuration blocks as that file, and the key file they name.
    SystemConfig,
    /// Keeps its data in /var/lib/connector-host: a /var/lib of its own, where the data
    /// must land.
    SystemDataDir,
    /// A replica on PostgreSQL at db.internal:5432 (the README's replicas), its data in
    /// /var/lib/connector-host: the tests' PostgreSQL there (an /etc/hosts entry), with the
    /// role and database the README makes; the host's tables must land in it.
    Replica,
    /// Exports traces to 127.0.0.1:4318: an OTLP receiver there, which must get a span.
    TraceCollector,
    /// Opens the host's data at /var/lib/connector-host: the examples' host's data there.
    HostDataInSystemDir,
    /// Talks to the host at the default address: the examples' host at 127.0.0.1:8787.
    HostAtDefaultAddress,
    /// Lists an MCP server's tools at 127.0.0.1:8000: the official Python SDK's server
    /// there (`tests/fixtures/declarative/mcp_server.py`).
    McpServer,
    /// GETs 127.0.0.1:8080: a small HTTP server there, whose answer it must print.
    HttpServer,
    /// Calls GitHub's API: a network without a way out. Everything before the request
    /// must pass (arguments, config, the secret it names); it must end looking up
    /// api.github.com, and nowhere else.
    Offline,
}

/// The `initialize` request an `mcp` example answers first.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"examples","version":"0"}}}"#;

/// Examples that run until interrupted, by the text they start with (the first match
/// counts), with what they read on stdin and the text of the line (stdout or stderr)
/// they are there for.
const FOREGROUND: &[(&str, &str, &str)] = &[
    (
        "connector-host messages engineering --follow",
        "",
        "said hello",
    ),
    // The table's header comes with the first records.
    ("connector-host audit --since", "", "ACTION"),
    (
        "connector-host audit --target binding:eng/acme --follow",
        "",
        "ACTION",
    ),
    ("connector-host mcp --agent ada", INITIALIZE, r#""result""#),
    ("CONNECTOR_HOST_AGENT_TOKEN=", INITIALIZE, r#""result""#),
    // The scaffold's tool, called after the component loaded (and with --live, through
    // the host).
    ("connector-host dev ", "", "Hello, Ada!"),
    (
        "connector-host serve --config /etc/connector-host/host.toml --listen 0.0.0.0:8787",
        "",
        "connector-host listening on http://0.0.0.0:8787",
    ),
    (
        "connector-host serve --listen 0.0.0.0:8787",
        "",
        "connector-host listening on http://0.0.0.0:8787",
    ),
    (
        "connector-host serve",
        "",
        "connector-host listening on http://127.0.0.1:8787",
    ),
    (
        "CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET=",
        "",
        "connector-host listening on http://127.0.0.1:8787",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT=",
        "",
        "connector-host listening on http://127.0.0.1:8787",
    ),
];

/// How long a foreground example may take to print the line it is there for: a `serve`
/// compiles the bundled connectors first, on a runner other builds may share.
const FOREGROUND_WAIT: Duration = Duration::from_secs(300);

/// What an example must print (stdout or stderr), by the text it starts with.
const PRINTS: &[(&str, &str)] = &[
    ("connector-host call FILE.wasm echo", "\"hi\""),
    ("connector-host call ada acme.echo", "\"hi\""),
    ("connector-host call FILE.wasm fetch", FETCHED),
    ("connector-host pack remote.yaml", "remote.all_add"),
    (
        "connector-host call target/wasm32-wasip2/release/hello.wasm greet",
        "Hello, Ada!",
    ),
    ("connector-host call ada hello.greet", "Hello, Ada!"),
];

/// What the HTTP server at 127.0.0.1:8080 answers.
const FETCHED: &str = "fetched from 127.0.0.1:8080";

/// The manifests `pack` examples name: the examples folder's `github-pr` (also as
/// `MANIFEST.yaml`), two small ones, and one over an MCP server.
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
    (
        "remote.yaml",
        r#"kind: "commonagents.info/v1beta2/tool"
namespace: "remote"
name: "remote"
description: "The tools of a remote MCP server."
settings:
  properties:
    mcp_url:
      type: string
      description: "The server's Streamable HTTP endpoint."
mcp:
  url: "{settings.mcp_url}"
actions:
  - name: all
    description: "Every tool of the server."
    execute:
      mcp: {}
"#,
    ),
];

/// The webhook secret of the `hostile` test connector, which delivers the message the
/// `messages` examples read.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// The user and password of the registry behind credentials (`--username USER`).
const REGISTRY_USER: &str = "USER";
const REGISTRY_PASSWORD: &str = "registry-password-5ab1";

/// The `connector-host` lines of `text` (indented, as help texts show them), with the
/// variables some set first (`CONNECTOR_HOST_X=... connector-host ...`).
fn example_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        // A usage line's second form (`connector-host audit <COMMAND>`) is syntax, not an
        // example.
        .filter(|l| !l.contains(" <COMMAND>"))
        .filter(|l| l.starts_with("connector-host ") || sets_a_variable_first(l))
        .map(str::to_string)
        .collect()
}

/// `CONNECTOR_HOST_X=value connector-host ...`; prose about variables is not an example.
fn sets_a_variable_first(line: &str) -> bool {
    let Some((name, rest)) = line.split_once('=') else {
        return false;
    };
    name.starts_with("CONNECTOR_HOST_")
        && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        && rest.contains(" connector-host ")
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

/// The README's `sh` blocks, in order, each as its commands (a block with a
/// here-document is one command: a script).
fn readme_blocks() -> Vec<Vec<String>> {
    fenced(README, "sh")
        .into_iter()
        .map(|block| match block.text.contains("<<") {
            true => vec![block.text],
            false => commands(&block.text),
        })
        .collect()
}

/// The README's `toml` block after `marker`.
fn readme_toml(marker: &str) -> String {
    let at = README
        .find(marker)
        .unwrap_or_else(|| panic!("the README has {marker:?}"));
    fenced(&README[at..], "toml")
        .into_iter()
        .next()
        .map(|block| block.text)
        .unwrap_or_else(|| panic!("a toml block after {marker:?}"))
}

/// `$VAR`, else `$HOME/<folder>`: where a tool keeps its home before HOME is changed.
fn tool_home(var: &str, folder: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(
        || Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(folder),
        PathBuf::from,
    )
}

/// This checkout (`$REPO` in the README).
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// `sh -c LINE` in `dir` (see [`example_shell`]), with the examples' folder `home` as HOME,
/// this checkout as REPO and the registry password where `--password-env` finds it.
fn sh_command(dir: &Path, home: &Path, url: &str, line: &str) -> Command {
    let mut cmd = example_shell(dir, url, line);
    cmd.env("HOME", home)
        // rustup and cargo keep their homes (toolchains, the registry cache) under the
        // real HOME.
        .env("RUSTUP_HOME", tool_home("RUSTUP_HOME", ".rustup"))
        .env("CARGO_HOME", tool_home("CARGO_HOME", ".cargo"))
        .env("REPO", repository())
        .env("REGISTRY_TOKEN", REGISTRY_PASSWORD);
    cmd
}

/// The first entry of `table` whose text starts `line`.
fn find<'t, T>(table: &'t [(&str, T)], line: &str) -> Option<&'t T> {
    table
        .iter()
        .find(|(prefix, _)| line.starts_with(prefix))
        .map(|(_, v)| v)
}

/// The examples' world: the host, the registries, the components placeholders stand for,
/// and what the examples printed that later ones use.
struct Examples {
    /// The examples' folder (HOME).
    home: PathBuf,
    url: String,
    host: std::net::SocketAddr,
    registry: Option<String>,
    registry_with_credentials: Option<String>,
    scaffolded: PathBuf,
    python: Option<PathBuf>,
    /// What each push to the anonymous registry published: repository, tag, digest.
    pushes: Vec<(String, String, String)>,
    /// What the current README block exported (`export NAME=VALUE`), for its later
    /// commands.
    exported: Vec<(String, String)>,
    /// Examples skipped for want of namespaces, and why.
    skipped: Vec<(String, String)>,
    ran: usize,
}

impl Examples {
    fn sh(&self, dir: &Path, line: &str) -> Command {
        let mut cmd = sh_command(dir, &self.home, &self.url, line);
        cmd.envs(self.exported.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// `export NAME=VALUE`: the value as the shell expands it, for the block's later
    /// commands.
    fn export(&mut self, line: &str, dir: &Path) {
        let (name, script) = export(line).expect("an export line");
        let out = self.sh(dir, &script).output().expect("sh");
        assert!(out.status.success(), "the example `{line}` failed: {out:?}");
        let value = String::from_utf8_lossy(&out.stdout).into_owned();
        self.exported.push((name, value));
    }

    /// Writes the files the placeholders of `line` stand for into `dir`.
    fn placeholders(&self, dir: &Path, line: &str) {
        let bytes = match find(COMPONENTS, line).copied().unwrap_or(Component::Acme) {
            Component::Acme => connector_bundled::component("acme")
                .expect("bundled acme")
                .to_vec(),
            Component::GitHub => connector_bundled::component("github")
                .expect("bundled github")
                .to_vec(),
            Component::Fetch => std::fs::read(guests::HOSTILE).expect("the hostile guest"),
            Component::Scaffolded => std::fs::read(&self.scaffolded).expect("the scaffold"),
        };
        for name in ["FILE.wasm", "COMPONENT"] {
            std::fs::write(dir.join(name), &bytes).unwrap();
        }
        std::fs::write(dir.join("token.txt"), "ghp_exampletoken0000\n").unwrap();
    }

    /// `line` with its registry placeholders filled in (see the module docs), or `None`
    /// when it names a registry and there is none.
    fn with_registry(&self, line: &str) -> Option<String> {
        if !line.contains("oci://REGISTRY/") {
            return Some(line.to_string());
        }
        let registry = if line.contains("--username") {
            self.registry_with_credentials.as_ref()?
        } else {
            self.registry.as_ref()?
        };
        let mut line = line.replace("oci://REGISTRY/", &format!("oci://{registry}/"));
        if let Some((repository, tag, digest)) = self.pushes.first() {
            line = line
                .replace("REPOSITORY:TAG", &format!("{repository}:{tag}"))
                .replace(
                    "REPOSITORY@sha256:DIGEST",
                    &format!("{repository}@{digest}"),
                );
        }
        if let Some((_, _, digest)) = self.pushes.last() {
            line = line.replace("@sha256:HEX", &format!("@{digest}"));
        }
        Some(line)
    }

    /// Runs one example (a line, or a README script) in `dir`; the folder it ends in.
    fn run(&mut self, example: &str, dir: &Path) -> PathBuf {
        if find(NOT_RUN, example).is_some() {
            return dir.to_path_buf();
        }
        let Some(line) = self.with_registry(example) else {
            eprintln!("skipped (no OCI registry): {example}");
            return dir.to_path_buf();
        };
        self.placeholders(dir, &line);
        self.ran += 1;
        if export(&line).is_some() {
            self.export(&line, dir);
            return dir.to_path_buf();
        }
        if let Some(machine) = find(MACHINES, &line).copied() {
            if !self.on_own_machine(machine, &line, dir) {
                self.ran -= 1;
            }
            return dir.to_path_buf();
        }
        if let Some((input, expect)) = find_foreground(&line) {
            let mut running = Foreground::start(self.sh(dir, &line), input);
            running
                .until(expect, FOREGROUND_WAIT)
                .unwrap_or_else(|why| panic!("the example `{line}` failed: {why}"));
            return dir.to_path_buf();
        }
        if line.contains('\n') {
            return self.script(&line, dir);
        }
        let out = self.sh(dir, &line).output().expect("run sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the example `{line}` failed ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        check_prints(&line, &out);
        if line.starts_with("connector-host push ") {
            self.note_push(&line, &stdout);
        }
        dir.to_path_buf()
    }

    /// A README block as one script (`set -e`: it fails at its first failing command);
    /// the folder it ends in.
    fn script(&self, script: &str, dir: &Path) -> PathBuf {
        let marker = tempfile::NamedTempFile::new().unwrap();
        let text = format!("set -e\n{script}\npwd > '{}'\n", marker.path().display());
        let out = self.sh(dir, &text).output().expect("run sh");
        assert!(
            out.status.success(),
            "the README's block failed ({}):\n{script}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ended = std::fs::read_to_string(marker.path()).unwrap();
        PathBuf::from(ended.trim_end())
    }

    /// What a push to the anonymous registry published, from the pinned reference it
    /// printed (oci://…/repository@sha256:<64 hex>).
    fn note_push(&mut self, line: &str, stdout: &str) {
        if line.contains("--username") {
            return;
        }
        let pinned = stdout
            .split_whitespace()
            .find(|w| w.starts_with("oci://") && w.contains("@sha256:"))
            .unwrap_or_else(|| panic!("`{line}` printed no pinned reference: {stdout}"));
        let (name, digest) = pinned.split_once('@').expect("a pinned reference");
        let repository = name
            .trim_start_matches("oci://")
            .split_once('/')
            .map(|(_, r)| r.to_string())
            .expect("a repository");
        let digest = digest
            .get(..71)
            .expect("sha256:<64 hex digits>")
            .to_string();
        let tag = line
            .split_whitespace()
            .find(|w| w.starts_with("oci://"))
            .and_then(|r| r.rsplit_once(':'))
            .map(|(_, tag)| tag.to_string())
            .expect("a tag");
        self.pushes.push((repository, tag, digest));
    }

    /// Runs `line` on a machine of its own (see [`Machine`]); `false` when it was skipped.
    fn on_own_machine(&mut self, machine: Machine, line: &str, dir: &Path) -> bool {
        let overlays: &[&str] = match machine {
            Machine::SystemConfig => &["/etc"],
            Machine::SystemDataDir | Machine::HostDataInSystemDir => &["/var/lib"],
            Machine::Replica => &["/etc", "/var/lib"],
            _ => &[],
        };
        let mut ns = match Namespaces::new(overlays) {
            Ok(ns) => ns,
            Err(why) => {
                // Said at the end, on one line (and under CI=true a failure).
                self.skipped.push((line.to_string(), why));
                return false;
            }
        };
        // A `serve` starts where nothing is, as on a new machine; other examples where
        // the others run.
        let fresh = tempfile::tempdir().unwrap();
        let serves = matches!(
            machine,
            Machine::FreeAddress
                | Machine::SystemConfig
                | Machine::SystemDataDir
                | Machine::Replica
                | Machine::TraceCollector
        );
        let cwd = if serves { fresh.path() } else { dir };
        let mut collector = None;
        let mut replica = None;
        let mut _mcp_server = None;
        match machine {
            Machine::FreeAddress | Machine::Offline | Machine::SystemDataDir => {}
            Machine::SystemConfig => {
                let config = format!(
                    "{}\n{}",
                    readme_toml("### Configuration"),
                    readme_toml("Trust is configured on the host:")
                );
                ns.write("/etc/connector-host/host.toml", config);
                // The key `trust.keys` names, made as the README makes keys.
                let keys = tempfile::tempdir().unwrap();
                let made = self
                    .sh(keys.path(), "connector-host keygen --out release")
                    .output()
                    .expect("keygen");
                assert!(made.status.success(), "keygen: {made:?}");
                let key = std::fs::read(keys.path().join("release.pub")).unwrap();
                ns.write("/etc/connector-host/release.pub", key);
            }
            Machine::TraceCollector => {
                let listener =
                    tokio::net::TcpListener::from_std(ns.listen("127.0.0.1:4318")).expect("tokio");
                collector = Some(Receiver::start_on(listener));
            }
            Machine::Replica => {
                // Without PostgreSQL (outside CI) `require_postgres` said so.
                let Some(cluster) = integration_tests::postgres::require_postgres() else {
                    return false;
                };
                // What the block's two `sudo -u postgres` lines make.
                for sql in [
                    "CREATE ROLE connector_host LOGIN PASSWORD 'PASSWORD'",
                    "CREATE DATABASE connector_host OWNER connector_host",
                ] {
                    cluster
                        .psql("postgres", sql)
                        .expect("the role and database of the README's replicas");
                }
                let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
                ns.write("/etc/hosts", format!("{hosts}\n127.0.0.1 db.internal\n"));
                ns.forward(
                    "127.0.0.1:5432",
                    std::net::SocketAddr::from(([127, 0, 0, 1], cluster.port())),
                );
                replica = Some(cluster);
            }
            Machine::HostDataInSystemDir => {
                ns.bind(&self.home.join("data"), "/var/lib/connector-host");
            }
            Machine::HostAtDefaultAddress => ns.forward("127.0.0.1:8787", self.host),
            Machine::HttpServer => {
                ns.serve(
                    "127.0.0.1:8080",
                    axum::Router::new().fallback(|| async { FETCHED }),
                );
            }
            Machine::McpServer => {
                // Without the SDK (outside CI) `required` said so.
                let Some(python) = self.python.clone() else {
                    return false;
                };
                _mcp_server = Some(python_mcp_server(&ns, &python, fresh.path()));
            }
        }
        let mut cmd = self.sh(cwd, line);
        // Only what the machine holds is reachable there: the host at its default address
        // if anything.
        cmd.env_remove("CONNECTOR_HOST_URL");
        ns.enter(&mut cmd);
        if let Some((input, expect)) = find_foreground(line) {
            let mut running = Foreground::start(cmd, input);
            running
                .until(expect, FOREGROUND_WAIT)
                .unwrap_or_else(|why| panic!("the example `{line}` failed: {why}"));
            match machine {
                Machine::FreeAddress => {
                    assert!(
                        fresh.path().join("data/host.db").is_file(),
                        "`{line}` keeps no data in ./data"
                    );
                }
                Machine::SystemDataDir => {
                    assert!(
                        ns.is_file("/var/lib/connector-host/host.db"),
                        "`{line}` keeps no data in /var/lib/connector-host"
                    );
                }
                Machine::Replica => {
                    let cluster = replica.expect("the replica's PostgreSQL");
                    let tables = cluster
                        .psql(
                            "connector_host",
                            "SELECT count(*) FROM information_schema.tables \
                             WHERE table_schema = 'public'",
                        )
                        .expect("the replica's database");
                    assert!(
                        tables.trim().parse::<u32>().is_ok_and(|n| n > 0),
                        "`{line}` made no tables in PostgreSQL: {tables}"
                    );
                    assert!(
                        !ns.is_file("/var/lib/connector-host/host.db"),
                        "`{line}` kept its data in SQLite, not in PostgreSQL"
                    );
                }
                Machine::TraceCollector => {
                    self.traced(&ns, fresh.path(), collector.as_ref().expect("collector"))
                }
                _ => {}
            }
            return true;
        }
        let out = cmd.stdin(Stdio::null()).output().expect("run sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if machine == Machine::Offline {
            // GitHub is out of reach: looking up api.github.com, the one host the
            // component may reach, is what fails, after the arguments, the config and
            // the secret passed (a missing secret fails first, naming it).
            assert_eq!(out.status.code(), Some(1), "`{line}`: {stdout}\n{stderr}");
            assert!(
                stderr.contains("tool_failed: HTTP request failed") && stderr.contains("DnsError"),
                "`{line}` did not end at looking up api.github.com: {stderr}"
            );
            return true;
        }
        assert!(
            out.status.success(),
            "the example `{line}` failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        check_prints(line, &out);
        if machine == Machine::McpServer {
            assert!(
                cwd.join("remote.wasm").is_file(),
                "`{line}` wrote no remote.wasm"
            );
        }
        true
    }

    /// A `serve` exporting traces: one API request to it becomes spans at the collector.
    fn traced(&self, ns: &Namespaces, dir: &Path, collector: &Receiver) {
        let mut list = self.sh(dir, "connector-host units list");
        list.env_remove("CONNECTOR_HOST_URL");
        ns.enter(&mut list);
        let out = list.output().expect("units list");
        assert!(out.status.success(), "units list against it: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !collector
            .spans()
            .iter()
            .any(|s| s.service == "connector-host")
        {
            assert!(
                Instant::now() < deadline,
                "no span of connector-host reached 127.0.0.1:4318 within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// What `line` printed has what [`PRINTS`] says it must.
fn check_prints(line: &str, out: &std::process::Output) {
    if let Some(expect) = find(PRINTS, line) {
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            printed.contains(expect),
            "the example `{line}` printed no {expect:?}: {printed}"
        );
    }
}

fn find_foreground(line: &str) -> Option<(&'static str, &'static str)> {
    FOREGROUND
        .iter()
        .find(|(prefix, _, _)| line.starts_with(prefix))
        .map(|&(_, input, expect)| (input, expect))
}

/// The official Python SDK's MCP server (`tests/fixtures/declarative/mcp_server.py`) on
/// 127.0.0.1:8000 inside `ns`, once it listens.
fn python_mcp_server(ns: &Namespaces, python: &Path, dir: &Path) -> Foreground {
    let mut cmd = Command::new(python);
    cmd.arg(repository().join("tests/fixtures/declarative/mcp_server.py"))
        .arg("8000")
        .arg(dir.join("headers.jsonl"))
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(dir);
    ns.enter(&mut cmd);
    let server = Foreground::start(cmd, "");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ns
        .inside(|| std::net::TcpStream::connect("127.0.0.1:8000").is_ok())
        .unwrap_or(false)
    {
        assert!(
            Instant::now() < deadline,
            "the Python MCP server did not listen on 127.0.0.1:8000"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
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
    let registry_with_credentials =
        Registry::start_with(Some((REGISTRY_USER, REGISTRY_PASSWORD))).await;
    let python = tokio::task::spawn_blocking(crate::mcp::python_with_mcp)
        .await
        .unwrap();
    let python = integration_tests::harness::required("the MCP Python SDK", python);
    let scaffold = tempfile::tempdir().unwrap();

    let examples = Examples {
        home: d.clone(),
        url: server.url.clone(),
        host: server.addr,
        registry: registry.as_ref().map(|r| r.host.clone()),
        registry_with_credentials: registry_with_credentials.as_ref().map(|r| r.host.clone()),
        scaffolded: scaffold
            .path()
            .join("greeter/target/wasm32-wasip2/release/greeter.wasm"),
        python,
        pushes: Vec::new(),
        exported: Vec::new(),
        skipped: Vec::new(),
        ran: 0,
    };
    let scaffold_dir = scaffold.path().to_path_buf();
    let examples = tokio::task::spawn_blocking(move || {
        let d = examples.home.clone();
        std::fs::write(d.join("BINDING.json"), r#"{"repo": "octo/hello"}"#).unwrap();
        std::fs::create_dir(d.join("DIR")).unwrap();
        for (name, text) in MANIFESTS {
            let path = d.join(name);
            std::fs::create_dir_all(path.parent().expect("a folder")).unwrap();
            std::fs::write(path, text).unwrap();
        }
        // What the examples refer to without creating it first; the component with the
        // scaffold's `hello` tool.
        for (setup, folder) in [
            ("connector-host units put acme-corp", &d),
            (
                "connector-host units put engineering --parent acme-corp",
                &d,
            ),
            ("connector-host units put research", &d),
            ("connector-host agents put ada --unit engineering", &d),
            (
                r#"connector-host bind engineering hostile --config '{"routes": ["r1"]}'"#,
                &d,
            ),
            ("connector-host new greeter", &scaffold_dir),
        ] {
            let out = examples.sh(folder, setup).output().expect("sh");
            assert!(
                out.status.success(),
                "{setup}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(examples.scaffolded.is_file(), "`new greeter` built nothing");
        examples
    })
    .await
    .unwrap();
    // One message in engineering's inbox, for `messages` to show.
    let body = r#"{"messages": [{"route": "r1", "kind": "note.said", "threadKey": "t-1", "payload": {"text": "said hello"}}]}"#;
    let (status, answer) = send_standard_webhook(
        &reqwest::Client::new(),
        &server.url,
        "hostile",
        "m-1",
        body.as_bytes(),
        SECRET,
        now_unix(),
    )
    .await
    .expect("delivered");
    assert_eq!(status, 202, "{answer}");

    let examples = tokio::task::spawn_blocking(move || {
        let mut examples = examples;
        let d = examples.home.clone();
        let helps = help_examples();
        let readme: Vec<String> = readme_blocks().concat();
        for (prefix, _) in NOT_RUN {
            assert!(
                helps.iter().chain(&readme).any(|l| l.starts_with(prefix)),
                "NOT_RUN lists `{prefix}`, which no --help and no README block shows any more"
            );
        }
        for (prefix, _) in COMPONENTS {
            assert!(
                helps.iter().any(|l| l.starts_with(prefix)),
                "COMPONENTS lists `{prefix}`, which no --help shows any more"
            );
        }
        for prefix in MACHINES
            .iter()
            .map(|(p, _)| *p)
            .chain(FOREGROUND.iter().map(|(p, _, _)| *p))
            .chain(PRINTS.iter().map(|(p, _)| *p))
        {
            assert!(
                helps.iter().chain(&readme).any(|l| l.starts_with(prefix)),
                "`{prefix}` is listed, but no --help and no README block shows it any more"
            );
        }
        for line in &helps {
            examples.run(line, &d);
        }
        let readme = readme_blocks();
        // The README, as one terminal session starting in the examples' folder: a block
        // goes on where the one before it ended (`cd`), and what it exports holds for the
        // rest of it (a replica's settings are not the next section's).
        let mut cwd = d.clone();
        for block in &readme {
            examples.exported.clear();
            for command in block {
                cwd = examples.run(command, &cwd);
            }
        }
        examples.exported.clear();
        examples
    })
    .await
    .unwrap();

    if !examples.skipped.is_empty() {
        let names: Vec<&str> = examples.skipped.iter().map(|(l, _)| l.as_str()).collect();
        skip_or_fail::<()>(
            "private namespaces",
            &format!(
                "{} examples not run ({}): {}",
                names.len(),
                examples.skipped[0].1,
                names.join(" | ")
            ),
        );
    }
    assert!(examples.ran >= 60, "only {} examples ran", examples.ran);
    // What the examples did is there: `context ada --write-files DIR` wrote the files of
    // the connectors bound above ada's unit; keygen, pack and the README wrote theirs.
    let d = &examples.home;
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
        "hello/target/wasm32-wasip2/release/hello.wasm",
        "hello/cosign.key",
    ] {
        assert!(d.join(written).is_file(), "no {written}");
    }
    // The README's second command is what CI runs.
    let ci = std::fs::read_to_string(repository().join(".ci/run")).unwrap();
    assert_eq!(
        ci.lines().rfind(|l| !l.trim().is_empty()),
        Some("cargo test --workspace"),
        ".ci/run no longer ends with the README's test command"
    );
    drop(server);
    drop(registry);
    drop(registry_with_credentials);
}

const CONNECTOR_EXAMPLES: &str = include_str!("../../connectors/examples/README.md");

/// connectors/examples/README.md's `sh` blocks run as written, in order, each as one
/// script, from a copy of the repository's `connectors/examples` folder (the commands name
/// the manifests from the repository's root), against a host configured with the file's
/// `toml` block and a GitHub App (`github_app.app_id`, `private_key_path`: the test App's
/// key), which `github-pr` needs. Its units exist first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connector_examples_commands_run_as_written() {
    let root = tempfile::tempdir().unwrap();
    let examples = root.path().join("connectors/examples");
    std::fs::create_dir_all(&examples).unwrap();
    for name in ["github-file.yaml", "github-pr.yaml"] {
        std::fs::copy(
            repository().join("connectors/examples").join(name),
            examples.join(name),
        )
        .unwrap();
    }
    let toml = fenced(CONNECTOR_EXAMPLES, "toml");
    assert_eq!(toml.len(), 1, "one toml block");
    let config = format!(
        "[github_app]\napp_id = \"1012345\"\nprivate_key_path = \"{}\"\n\n{}",
        repository()
            .join("tests/fixtures/github/app-key-pkcs1.pem")
            .display(),
        toml[0].text
    );
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_with_config(data.path(), &[], &config).await;
    let (url, dir) = (server.url.clone(), root.path().to_path_buf());
    let ran = tokio::task::spawn_blocking(move || {
        let blocks: Vec<String> = fenced(CONNECTOR_EXAMPLES, "sh")
            .into_iter()
            .map(|b| b.text)
            .collect();
        for setup in ["connector-host units put engineering", "connector-host units put web"] {
            let out = sh_command(&dir, &dir, &url, setup).output().expect("sh");
            assert!(out.status.success(), "{setup}: {out:?}");
        }
        for block in &blocks {
            let out = sh_command(&dir, &dir, &url, &format!("set -e\n{block}"))
                .stdin(Stdio::null())
                .output()
                .expect("sh");
            assert!(
                out.status.success(),
                "connectors/examples/README.md's block failed ({}):\n{block}\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        blocks.len()
    })
    .await
    .unwrap();
    assert!(ran >= 4, "only {ran} blocks");
    // What the blocks did: both components packed and installed, both bound.
    let client = reqwest::Client::new();
    for (unit, slug) in [("engineering", "gh-file"), ("web", "gh-pr")] {
        let (status, body) = integration_tests::harness::send(
            &client,
            reqwest::Method::GET,
            &format!("{}/api/v1/units/{unit}/connectors", server.url),
            Some(integration_tests::harness::OPERATOR_TOKEN),
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(body.to_string().contains(slug), "{slug} on {unit}: {body}");
    }
}
