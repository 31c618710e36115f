//! The `connector-host` command line.
//!
//! Three kinds of commands live here:
//! - `serve` runs the host ([`serve`]);
//! - `inspect` and `call FILE.wasm ...` load a component locally, for connector developers
//!   ([`inspect`], [`call`]); `pack` compiles a declarative tool manifest into a component
//!   ([`pack`]);
//! - everything else talks to a running host over its HTTP API as an operator
//!   ([`client`] holds the one HTTP client they share).
//!
//! Every command returns a [`CliError`] on failure; `main` prints it to stderr and exits
//! with its code: `1` when the thing asked for ran and failed (an invalid component, a
//! rejected request, a failing tool), `2` when the invocation itself is wrong (bad flags,
//! an unreadable file, malformed JSON).

pub mod agents;
pub mod audit;
pub mod bindings;
pub mod call;
pub mod client;
pub mod connectors;
pub mod context;
pub mod dev;
pub mod inspect;
pub mod live;
mod local_cache;
pub mod mcp;
pub mod messages;
pub mod new;
pub(crate) mod new_lang;
pub mod output;
pub mod pack;
pub mod registry;
pub mod serve;
pub mod tools;
pub mod units;

use std::fmt;
use std::io::Read;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use connector_core::config::ServeFlags;

/// Where operator commands look for the host unless told otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8787";

const ABOUT: &str =
    "Runs connectors as sandboxed WebAssembly components, and manages a running host";

const LONG_ABOUT: &str = "\
Runs connectors as sandboxed WebAssembly components, and manages a running host.

`serve` starts the host. `inspect` and `call FILE.wasm` load a component locally, without a
host, for connector developers; `pack` turns a declarative tool manifest (YAML) into a
component. Every other command talks to a running host over its HTTP API (--url, default
http://127.0.0.1:8787) with the operator token (--token, or $CONNECTOR_HOST_OPERATOR_TOKEN, or
the file ./data/operator-token that `serve` writes).";

const EXAMPLES: &str = "\
Examples (FILE.wasm and MANIFEST.yaml stand for your own files):
  connector-host serve
  connector-host inspect FILE.wasm
  connector-host pack MANIFEST.yaml -o FILE.wasm
  connector-host call FILE.wasm echo '{\"message\": \"hi\"}'
  connector-host units put engineering --display-name 'Engineering'
  connector-host bind engineering acme
  connector-host agents put ada --unit engineering
  connector-host tools --agent ada
  connector-host call ada acme.echo '{\"message\": \"hi\"}'
  connector-host units list

Output: a table or a one-line summary (call: the tool's result as text, the outcome on
stderr); --json prints the full JSON answer, and --raw the one value where there is one
(agents token, connectors install).
Exit codes: 0 success, 1 the request or call failed, 2 bad usage or unreadable input.";

/// `connector-host`.
#[derive(Debug, Parser)]
#[command(name = "connector-host", version, about = ABOUT, long_about = LONG_ABOUT, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub output: output::OutputArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// How operator commands reach the host.
#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// Base URL of the running host (operator commands only).
    #[arg(
        long,
        global = true,
        env = "CONNECTOR_HOST_URL",
        default_value = DEFAULT_URL,
        hide_env_values = true,
        value_name = "URL",
        help_heading = "Host connection"
    )]
    pub url: String,

    /// Bearer token for the host: the operator token, or an agent's token for agent
    /// routes. When absent: $CONNECTOR_HOST_OPERATOR_TOKEN, else the file
    /// <data dir>/operator-token written by `serve` (data dir: $CONNECTOR_HOST_DATA_DIR or ./data).
    #[arg(
        long,
        global = true,
        env = "CONNECTOR_HOST_OPERATOR_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        help_heading = "Host connection"
    )]
    pub token: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the host: HTTP API, MCP endpoint and webhook receiver
    #[command(after_help = SERVE_HELP)]
    Serve(ServeArgs),

    /// Load a component locally and describe it (--json: its `Connector` JSON)
    #[command(after_help = inspect::HELP)]
    Inspect(inspect::InspectArgs),

    /// Call a tool: locally in a component file, or through the host on behalf of an agent
    #[command(after_help = call::HELP)]
    Call(call::CallArgs),

    /// Scaffold a new connector crate that builds and passes `inspect` as is
    #[command(after_help = new::HELP)]
    New(new::NewArgs),

    /// Compile a declarative tool manifest (commonagents.info/v1beta2/tool YAML) into a
    /// connector component
    #[command(after_help = pack::HELP)]
    Pack(pack::PackArgs),

    /// Publish a component to an OCI registry, optionally with a cosign signature
    #[command(after_help = registry::PUSH_HELP)]
    Push(registry::PushArgs),

    /// Make an ECDSA P-256 key pair in cosign's formats (for `push --sign` and trust.keys)
    #[command(after_help = registry::KEYGEN_HELP)]
    Keygen(registry::KeygenArgs),

    /// Watch a component file: re-validate and print manifest changes on every rebuild
    /// (with --live: keep a running host in step)
    #[command(after_help = dev::HELP)]
    Dev(dev::DevArgs),

    /// Create, show and delete units (they nest through --parent)
    #[command(subcommand)]
    Units(units::UnitsCommand),

    /// Create, show and delete agents, and mint agent tokens
    #[command(subcommand)]
    Agents(agents::AgentsCommand),

    /// Bind a connector to a unit (grants its tools to the unit and everything below it)
    #[command(after_help = bindings::BIND_HELP)]
    Bind(bindings::BindArgs),

    /// Unbind a connector from a unit (revokes the grants of that binding)
    Unbind(bindings::UnbindArgs),

    /// List the connectors bound to a unit
    Bindings(bindings::BindingsArgs),

    /// Show the effective tools of a unit or an agent
    #[command(after_help = tools::TOOLS_HELP)]
    Tools(tools::ToolsArgs),

    /// Grant a tool or a whole namespace explicitly to a unit or an agent
    #[command(after_help = tools::GRANT_HELP)]
    Grant(tools::GrantArgs),

    /// Revoke an explicit grant from a unit or an agent
    #[command(after_help = tools::GRANT_HELP)]
    Revoke(tools::RevokeArgs),

    /// List, show, install and remove connectors of the running host
    #[command(subcommand)]
    Connectors(connectors::ConnectorsCommand),

    /// Read the messages (translated webhooks) delivered to a unit
    Messages(messages::MessagesArgs),

    /// Read the audit log (who changed what, every tool call and delivery), or verify
    /// its hash chain
    #[command(after_help = audit::HELP)]
    Audit(audit::AuditArgs),

    /// Show an agent's runtime context (env vars and files), or write it out
    Context(context::ContextArgs),

    /// Serve an agent's tools as a local MCP server on stdin/stdout (from the host's data
    /// with --local, else bridged to the running host)
    #[command(after_help = mcp::HELP)]
    Mcp(mcp::McpArgs),
}

const SERVE_HELP: &str = "\
Settings come from flags, then CONNECTOR_HOST_* environment variables, then the TOML file,
then defaults (listen 127.0.0.1:8787, data dir ./data). See the README for every key.

Examples:
  connector-host serve
  connector-host serve --config /etc/connector-host/host.toml --listen 0.0.0.0:8787
  CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET=... connector-host serve --data-dir /var/lib/connector-host";

/// `connector-host serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on, e.g. 127.0.0.1:8787 or 0.0.0.0:8787 [env: CONNECTOR_HOST_LISTEN]
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Directory of the database, the component cache and the generated operator token
    /// [env: CONNECTOR_HOST_DATA_DIR]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl ServeArgs {
    /// The flags that beat every other source of configuration.
    pub fn flags(&self) -> ServeFlags {
        ServeFlags {
            listen: self.listen.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

/// A failed command: what to print on stderr and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The process exit code.
    pub code: u8,
    /// The text, without the `error: ` prefix (it may span several lines).
    pub message: String,
}

impl CliError {
    /// The thing asked for ran and failed (exit code 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }

    /// The invocation is wrong or its input unreadable (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.message)
    }
}

impl std::error::Error for CliError {}

/// Runs a command that talks to a running host. (`serve`, `inspect` and a local `call`
/// need an async runtime and are run by `main`.)
pub fn run_remote(
    remote: &RemoteArgs,
    out: output::OutputArgs,
    command: Command,
) -> Result<(), CliError> {
    let client = client::Client::new(remote)?;
    match command {
        Command::Units(cmd) => units::run(&client, cmd, out),
        Command::Agents(cmd) => agents::run(&client, cmd, out),
        Command::Bind(args) => bindings::bind(&client, args, out),
        Command::Unbind(args) => bindings::unbind(&client, args, out),
        Command::Bindings(args) => bindings::list(&client, args, out),
        Command::Tools(args) => tools::list(&client, args, out),
        Command::Grant(args) => tools::grant(&client, args, out),
        Command::Revoke(args) => tools::revoke(&client, args, out),
        Command::Call(args) => call::run_remote(&client, args, out),
        Command::Connectors(cmd) => connectors::run(&client, cmd, out),
        Command::Messages(args) => messages::run(&client, args, out),
        Command::Audit(args) => audit::run(&client, args, out),
        Command::Context(args) => context::run(&client, args, out),
        Command::Mcp(args) => mcp::run(remote, args),
        Command::Serve(_)
        | Command::Inspect(_)
        | Command::New(_)
        | Command::Pack(_)
        | Command::Push(_)
        | Command::Keygen(_)
        | Command::Dev(_) => Err(CliError::usage(
            "this command does not talk to a running host",
        )),
    }
}

/// Reads a JSON value given on the command line: inline JSON, `@FILE`, or `@-` for stdin.
/// `what` names the argument in error messages.
pub fn read_json_arg(what: &str, raw: &str) -> Result<Value, CliError> {
    let text = match raw.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::usage(format!("could not read {what} from stdin: {e}")))?;
            text
        }
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::usage(format!("could not read {what} from {path}: {e}")))?,
        None => raw.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "{what}: not valid JSON ({e}); pass inline JSON such as '{{\"key\": \"value\"}}', or @FILE"
        ))
    })
}

// ----- output ------------------------------------------------------------------------
//
// Much of what the commands print was written by a connector or came over the network
// (a tool's result or error text, descriptions, env values, a host's error message). A
// terminal obeys control characters in it: an escape sequence can clear the screen,
// retitle the window or fake a prompt, a carriage return can overwrite a line, a bidi
// override can show `exe.txt` for `txt.exe`. So every command prints through the three
// functions below, which write each such character (C0 but newline and tab, DEL, C1,
// U+202A–U+202E, U+2066–U+2069; see `ids::is_terminal_control`) as a visible escape, and
// JSON with them as JSON escapes (the same value for a program reading it).

/// Prints a JSON value, pretty, to stdout (see [`json_for_terminals`]).
pub fn print_json(value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    print_out(&format!("{}\n", json_for_terminals(&text)));
}

/// JSON text with every character a terminal would act on written as a JSON `\uXXXX`
/// escape: serde_json escapes C0 controls in strings but writes DEL, C1 controls and
/// bidi overrides as they are. None of them can be JSON syntax, so each is inside a
/// string, where its escape is the same value.
pub fn json_for_terminals(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        // Newlines and tabs outside strings are the pretty layout (inside, serde_json
        // has escaped them).
        if connector_model::ids::is_terminal_control(c) && !matches!(c, '\n' | '\t') {
            // All are in the Basic Multilingual Plane: one `\uXXXX` each.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `text` to stdout, control characters escaped (newlines and tabs kept). A
/// closed stdout (`... | head`) is not an error worth a panic: the output is simply
/// dropped.
pub fn print_out(text: &str) {
    use std::io::Write;
    let text = connector_model::ids::escape_controls_keeping_lines(text);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Writes `text` and a newline to stderr, control characters escaped (newlines and tabs
/// kept): errors, notes and progress.
pub fn print_err(text: &str) {
    use std::io::Write;
    let text = connector_model::ids::escape_controls_keeping_lines(text);
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}").and_then(|()| err.flush());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut argv = vec!["connector-host"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
    }

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_flags() {
        let cli = parse(&[
            "serve",
            "--config",
            "host.toml",
            "--listen",
            "0.0.0.0:9000",
            "--data-dir",
            "/srv",
        ])
        .expect("parses");
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.config, Some(PathBuf::from("host.toml")));
        assert_eq!(
            args.flags(),
            ServeFlags {
                listen: Some("0.0.0.0:9000".into()),
                data_dir: Some("/srv".into())
            }
        );
        let cli = parse(&["serve"]).expect("parses");
        let Command::Serve(args) = cli.command else {
            panic!("not serve")
        };
        assert_eq!(args.flags(), ServeFlags::default());
        assert!(parse(&["serve", "--bogus"]).is_err());
    }

    #[test]
    fn global_url_and_token() {
        let cli =
            parse(&["units", "get", "eng", "--url", "http://h:1", "--token", "t"]).expect("parses");
        assert_eq!(cli.remote.url, "http://h:1");
        assert_eq!(cli.remote.token.as_deref(), Some("t"));
        let cli = parse(&["--url", "http://h:2", "units", "get", "eng"]).expect("parses");
        assert_eq!(cli.remote.url, "http://h:2");
    }

    #[test]
    fn units_and_agents() {
        let cli = parse(&[
            "units",
            "put",
            "team-a",
            "--parent",
            "org",
            "--display-name",
            "Team A",
        ])
        .expect("parses");
        let Command::Units(units::UnitsCommand::Put(put)) = cli.command else {
            panic!("not units put")
        };
        assert_eq!(
            (
                put.unit.as_str(),
                put.parent.as_deref(),
                put.display_name.as_deref()
            ),
            ("team-a", Some("org"), Some("Team A"))
        );

        let cli = parse(&["agents", "put", "ada", "--unit", "a", "--unit", "b"]).expect("parses");
        let Command::Agents(agents::AgentsCommand::Put(put)) = cli.command else {
            panic!("not agents put")
        };
        assert_eq!(put.units, vec!["a", "b"]);
        assert!(
            parse(&["agents", "put", "ada"]).is_err(),
            "an agent needs at least one unit"
        );

        let cli = parse(&["agents", "token", "ada", "--ttl", "600"]).expect("parses");
        let Command::Agents(agents::AgentsCommand::Token(token)) = cli.command else {
            panic!("not agents token")
        };
        assert_eq!(token.ttl, Some(600));
        assert!(parse(&["agents", "token", "ada", "--ttl", "soon"]).is_err());
    }

    #[test]
    fn tools_grant_revoke_need_exactly_one_subject() {
        assert!(parse(&["tools"]).is_err());
        assert!(parse(&["tools", "--unit", "u", "--agent", "a"]).is_err());
        let cli = parse(&["tools", "--agent", "ada", "--json"]).expect("parses");
        let Command::Tools(args) = cli.command else {
            panic!("not tools")
        };
        assert_eq!(args.subject.path(), ("agents", "ada"));
        assert!(cli.output.json);

        let cli = parse(&["grant", "--unit", "eng", "--namespace", "acme"]).expect("parses");
        let Command::Grant(args) = cli.command else {
            panic!("not grant")
        };
        assert_eq!(args.subject.path(), ("units", "eng"));
        assert_eq!(args.target.body(), serde_json::json!({"namespace": "acme"}));
        assert!(
            parse(&["grant", "--unit", "eng"]).is_err(),
            "grant needs --tool or --namespace"
        );
        assert!(parse(&[
            "grant",
            "--unit",
            "eng",
            "--tool",
            "a.b",
            "--namespace",
            "a"
        ])
        .is_err());

        // One argument style for both: revoke names its target as grant does.
        let cli = parse(&["revoke", "--agent", "ada", "--tool", "acme.echo"]).expect("parses");
        let Command::Revoke(args) = cli.command else {
            panic!("not revoke")
        };
        assert_eq!(args.target.name(), "acme.echo");
        let cli = parse(&["revoke", "--unit", "eng", "--namespace", "acme"]).expect("parses");
        let Command::Revoke(args) = cli.command else {
            panic!("not revoke")
        };
        assert_eq!(args.target.name(), "acme");
        assert!(parse(&["revoke", "--agent", "ada", "acme.echo"]).is_err());
    }

    #[test]
    fn call_is_local_for_component_files_and_remote_for_agents() {
        let cli = parse(&[
            "call",
            "build/acme.wasm",
            "echo",
            "{\"text\":\"hi\"}",
            "--allow-host",
            "example.com",
            "--allow-private-networks",
        ])
        .expect("parses");
        let Command::Call(args) = cli.command else {
            panic!("not call")
        };
        assert!(args.is_local());
        assert_eq!(args.allow_host, vec!["example.com"]);
        assert!(args.allow_private_networks);

        let cli = parse(&["call", "ada", "acme.echo", "{}"]).expect("parses");
        let Command::Call(args) = cli.command else {
            panic!("not call")
        };
        assert!(!args.is_local());
        assert_eq!(args.arguments, "{}");

        let cli = parse(&["call", "acme.wasm", "echo"]).expect("arguments default to {}");
        let Command::Call(args) = cli.command else {
            panic!("not call")
        };
        assert!(args.is_local());
        assert_eq!(args.arguments, "{}");
    }

    #[test]
    fn connectors_and_messages() {
        let cli = parse(&["connectors", "remove", "acme", "--force"]).expect("parses");
        let Command::Connectors(connectors::ConnectorsCommand::Remove(args)) = cli.command else {
            panic!("not remove")
        };
        assert!(args.force);
        assert!(
            parse(&["connectors", "install"]).is_err(),
            "install needs a file"
        );

        let cli = parse(&["messages", "eng", "--after", "c42", "--limit", "10"]).expect("parses");
        let Command::Messages(args) = cli.command else {
            panic!("not messages")
        };
        assert_eq!((args.after.as_deref(), args.limit), (Some("c42"), Some(10)));
        assert!(
            parse(&["messages", "eng", "--limit", "501"]).is_err(),
            "the contract caps limit at 500"
        );
        assert!(parse(&["messages", "eng", "--limit", "0"]).is_err());
    }

    #[test]
    fn pack_flags() {
        let cli = parse(&[
            "pack",
            "tools/gh.yaml",
            "--version",
            "1.2.0",
            "--mcp-url",
            "http://127.0.0.1:9/mcp",
            "--allow-host",
            "a.example.com",
            "--allow-host",
            "b.example.com",
        ])
        .expect("parses");
        let Command::Pack(args) = cli.command else {
            panic!("not pack")
        };
        assert_eq!(args.output_path(), PathBuf::from("tools/gh.wasm"));
        let options = args.options();
        assert_eq!(options.version.as_deref(), Some("1.2.0"));
        assert_eq!(options.mcp_url.as_deref(), Some("http://127.0.0.1:9/mcp"));
        assert_eq!(options.allow_hosts, vec!["a.example.com", "b.example.com"]);
        let cli = parse(&["pack", "t.yaml", "-o", "out/x.wasm"]).expect("parses");
        let Command::Pack(args) = cli.command else {
            panic!("not pack")
        };
        assert_eq!(args.output_path(), PathBuf::from("out/x.wasm"));
        assert!(parse(&["pack"]).is_err(), "pack needs a manifest");
    }

    #[test]
    fn bind_config_defaults_to_empty_object() {
        let cli = parse(&["bind", "eng", "github"]).expect("parses");
        let Command::Bind(args) = cli.command else {
            panic!("not bind")
        };
        assert_eq!(args.config, "{}");
    }

    #[test]
    fn json_for_terminals_escapes_what_serde_json_leaves_raw() {
        let value =
            serde_json::json!({"m": "a\u{1b}b\u{7f}c\u{9b}d\u{202e}e\u{2069}f\u{200b}g\nh"});
        let text = json_for_terminals(&serde_json::to_string(&value).expect("JSON"));
        let pretty = serde_json::to_string_pretty(&value).expect("JSON");
        assert_eq!(
            json_for_terminals(&pretty).lines().count(),
            pretty.lines().count(),
            "the layout stays"
        );
        assert_eq!(
            text,
            r#"{"m":"a\u001bb\u007fc\u009bd\u202ee\u2069f"#.to_string() + "\u{200b}" + r#"g\nh"}"#
        );
        let back: Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(back, value, "the same value for a program");
    }

    #[test]
    fn json_arguments() {
        assert_eq!(
            read_json_arg("x", "{\"a\":1}").expect("json"),
            serde_json::json!({"a": 1})
        );
        let err = read_json_arg("--config", "{nope").expect_err("bad json");
        assert_eq!(err.code, 2);
        assert!(
            err.message.starts_with("--config: not valid JSON"),
            "{}",
            err.message
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.json");
        std::fs::write(&path, "{\"repo\": \"o/r\"}").expect("write");
        assert_eq!(
            read_json_arg("--config", &format!("@{}", path.display())).expect("file"),
            serde_json::json!({"repo": "o/r"})
        );
        assert_eq!(
            read_json_arg("--config", "@/no/such/file.json")
                .expect_err("missing")
                .code,
            2
        );
    }
}
