//! `connector-host mcp --agent A`: an agent's tools as a local (stdio) MCP server,
//! answered in this process from the host's data (`--local`, see [`crate::stdio::local`]) or
//! bridged to a running host's `/mcp/agents/{A}` (see [`crate::stdio`]).
//!
//! The bridge stays the default: `--url` (and `$CONNECTOR_HOST_URL`, and the default URL)
//! keep meaning what they meant, and a process only opens the data directory when asked
//! to, since the wrong directory would silently serve another host's state.

use std::path::PathBuf;

use clap::Args;
use reqwest::Url;

use super::client::{parse_base_url, resolve_token};
use super::{CliError, RemoteArgs};
use crate::stdio::{self, BridgeConfig};
pub use connector_core::config::ENV_AGENT_TOKEN;
use connector_core::config::{
    HostConfig, ServeFlags, ENV_DATA_DIR, ENV_OPERATOR_TOKEN, ENV_PREFIX,
};
use connector_model::ids::AgentId;

pub(crate) const HELP: &str = "\
Speaks MCP as newline-delimited JSON-RPC on stdin/stdout, for agent runtimes that only launch
local MCP servers. Logs and errors go to stderr; stdout carries only JSON-RPC. It answers in
one of two ways, with the same answers (revisions, tools/list, tools/call results and errors,
notifications/tools/list_changed): both are the host's own MCP endpoint.

Local (--local, or --data-dir / --config): this process opens the host's data itself (the data
directory and database `serve` uses, found from the same --data-dir, --config and
CONNECTOR_HOST_* variables) and answers every message in memory. The fastest path, for a
client on the machine that holds the host's data, beside a running `connector-host serve`:
each message first catches up with what serve wrote (a bind or grant made through the API or
CLI is seen by the next message), and changes reach the client as
notifications/tools/list_changed. It serves only AGENT's effective tools and will not start
when AGENT does not exist. It listens on no port, writes nothing at start and runs no webhook
work (serve does). Reading the data directory is operator access: give this mode only to
runtimes you would trust with the operator token. --url and --token are not used.

Bridge (the default): forwards every message to the host's Streamable HTTP endpoint
{url}/mcp/agents/{agent} (--url, else $CONNECTOR_HOST_URL, else http://127.0.0.1:8787),
relaying the host's notifications. For a host on another machine or in a container.
Token: --token, else $CONNECTOR_HOST_AGENT_TOKEN (an agent token: `connector-host agents
token A`), else the operator token ($CONNECTOR_HOST_OPERATOR_TOKEN or <data dir>/operator-token).

Examples:
  connector-host mcp --agent ada --local
  connector-host mcp --agent ada --data-dir /var/lib/connector-host
  connector-host mcp --agent ada --url http://127.0.0.1:8787 --token \"$(connector-host agents token ada --raw)\"
  CONNECTOR_HOST_AGENT_TOKEN=\"$(connector-host agents token ada --raw)\" connector-host mcp --agent ada

MCP client configuration (e.g. a runtime's mcpServers entry):
  {\"command\": \"connector-host\", \"args\": [\"mcp\", \"--agent\", \"ada\", \"--data-dir\", \"/var/lib/connector-host\"]}
  {\"command\": \"connector-host\", \"args\": [\"mcp\", \"--agent\", \"ada\"],
   \"env\": {\"CONNECTOR_HOST_URL\": \"http://127.0.0.1:8787\", \"CONNECTOR_HOST_AGENT_TOKEN\": \"...\"}}";

const LOCAL: &str = "Local (answer from the host's data in this process)";

/// `connector-host mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// The agent whose effective tools to serve.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,

    /// Answer in this process from the host's data instead of bridging to --url.
    #[arg(long, help_heading = LOCAL)]
    pub local: bool,

    /// The host's data directory, as given to `serve` (implies --local)
    /// [env: CONNECTOR_HOST_DATA_DIR; default ./data]
    #[arg(long, value_name = "DIR", help_heading = LOCAL)]
    pub data_dir: Option<PathBuf>,

    /// The host's TOML configuration file, as given to `serve --config` (implies --local).
    #[arg(long, value_name = "FILE", help_heading = LOCAL)]
    pub config: Option<PathBuf>,

    /// How tools are named: `canonical` (acme.echo) or `flat` (acme__echo: every name
    /// matches the model APIs' ^[a-zA-Z0-9_-]{1,64}$; calls by it reach the same tool).
    #[arg(long, value_name = "STYLE", default_value = "canonical", value_parser = ["canonical", "flat"])]
    pub tool_names: String,

    /// Serve only this namespace's tools, by bare name (`echo` for acme.echo), as the
    /// endpoint /mcp/agents/AGENT/namespaces/NAMESPACE does.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
}

impl McpArgs {
    /// Whether to answer from the host's data in this process.
    pub fn is_local(&self) -> bool {
        self.local || self.data_dir.is_some() || self.config.is_some()
    }
}

/// The endpoint `base/mcp/agents/<agent>` (the agent id escaped; any path prefix of
/// `base` kept).
pub fn endpoint(base: &Url, agent: &str) -> Url {
    named_endpoint(base, agent, None, false)
}

/// The endpoint of `agent`'s tools, of one `namespace` (`.../namespaces/<ns>`) or all, with
/// flat names (`?toolNames=flat`) or canonical ones.
pub fn named_endpoint(base: &Url, agent: &str, namespace: Option<&str>, flat: bool) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        path.extend(["mcp", "agents", agent]);
        if let Some(ns) = namespace {
            path.extend(["namespaces", ns]);
        }
    }
    if flat {
        url.set_query(Some("toolNames=flat"));
    }
    url
}

/// The token to send. `--token` wins; clap reads `$CONNECTOR_HOST_OPERATOR_TOKEN` into
/// the same flag, so a value equal to that variable counts as the operator fallback and
/// `$CONNECTOR_HOST_AGENT_TOKEN` goes first.
pub fn token(
    flag: Option<&str>,
    agent_env: Option<&str>,
    operator_env: Option<&str>,
    data_dir: Option<&str>,
) -> Option<String> {
    let agent_env = agent_env.map(str::trim).filter(|t| !t.is_empty());
    let flag = flag.map(str::trim).filter(|t| !t.is_empty());
    let from_flag = flag.filter(|f| operator_env.map(str::trim) != Some(*f));
    if let Some(t) = from_flag.or(agent_env) {
        return Some(t.to_string());
    }
    resolve_token(flag, data_dir)
}

/// Serves until stdin ends: locally or through the bridge.
pub fn run(remote: &RemoteArgs, args: McpArgs) -> Result<(), CliError> {
    let agent = AgentId::parse(&args.agent).map_err(|e| CliError::usage(e.message))?;
    if args.is_local() {
        return run_local(args, agent);
    }
    let base = parse_base_url(&remote.url)?;
    let env = |name| std::env::var(name).ok();
    let token = token(
        remote.token.as_deref(),
        env(ENV_AGENT_TOKEN).as_deref(),
        env(ENV_OPERATOR_TOKEN).as_deref(),
        env(ENV_DATA_DIR).as_deref(),
    );
    if token.is_none() {
        super::print_err(&format!(
            "connector-host mcp: no token (pass --token or set {ENV_AGENT_TOKEN}); the host will answer 401"
        ));
    }
    stdio::run(BridgeConfig {
        endpoint: named_endpoint(
            &base,
            &agent,
            args.namespace.as_deref(),
            args.tool_names == "flat",
        ),
        token,
    })
    .map_err(|e| CliError::failed(connector_remote_answer::error_chain(&e)))
}

/// The host's configuration as `serve` would load it from the same flags and
/// environment, then the stdio server on it.
fn run_local(args: McpArgs, agent: AgentId) -> Result<(), CliError> {
    // Tokens are the bridge's business: this process authorizes the agent itself, and
    // the agent token variable is no host setting to warn about.
    let env = std::env::vars_os().filter_map(|(name, value)| {
        let name = name.into_string().ok()?;
        (name.starts_with(ENV_PREFIX) && name != ENV_AGENT_TOKEN && name != ENV_OPERATOR_TOKEN)
            .then(|| Some((name, value.into_string().ok()?)))
            .flatten()
    });
    let flags = ServeFlags {
        listen: None,
        data_dir: args.data_dir.clone(),
    };
    let config = HostConfig::load(args.config.as_deref(), env, &flags)
        .map_err(|e| CliError::usage(e.to_string()))?;
    check_database(&config)?;
    let naming = crate::mcp::Naming {
        namespace: args.namespace.map(Into::into),
        flat: args.tool_names == "flat",
    };
    stdio::run_local(config, agent, naming)
        .map_err(|e| CliError::failed(connector_remote_answer::error_chain(&e)))
}

/// An SQLite database must exist already: opening it would create an empty host, which
/// has no agent to serve and is never the one a client meant.
fn check_database(config: &HostConfig) -> Result<(), CliError> {
    let Some(file) = crate::stdio::local::sqlite_file(config) else {
        return Ok(());
    };
    if file.is_file() {
        return Ok(());
    }
    Err(CliError::failed(format!(
        "no host database at {}: point --data-dir (or --config, or ${ENV_DATA_DIR}) at the data \
         directory `connector-host serve` uses, or start `connector-host serve --data-dir {}` \
         once to create it",
        file.display(),
        config.data_dir.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_keeps_prefixes_and_escapes() {
        let base = parse_base_url("http://127.0.0.1:8787").unwrap();
        assert_eq!(
            endpoint(&base, "ada").as_str(),
            "http://127.0.0.1:8787/mcp/agents/ada"
        );
        let base = parse_base_url("https://h.example/hosts/one/").unwrap();
        assert_eq!(
            endpoint(&base, "a.b").as_str(),
            "https://h.example/hosts/one/mcp/agents/a.b"
        );
        assert_eq!(
            named_endpoint(&base, "ada", Some("acme"), true).as_str(),
            "https://h.example/hosts/one/mcp/agents/ada/namespaces/acme?toolNames=flat"
        );
    }

    #[test]
    fn token_precedence() {
        // An explicit --token wins.
        assert_eq!(
            token(Some("flag"), Some("agent"), Some("op"), None).as_deref(),
            Some("flag")
        );
        // --token filled from the operator variable: the agent token goes first.
        assert_eq!(
            token(Some("op"), Some("agent"), Some("op"), None).as_deref(),
            Some("agent")
        );
        // No agent token: the operator token.
        assert_eq!(
            token(Some("op"), None, Some("op"), None).as_deref(),
            Some("op")
        );
        assert_eq!(
            token(None, Some("agent"), None, None).as_deref(),
            Some("agent")
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(token(None, None, None, dir.path().to_str()), None);
    }
}
