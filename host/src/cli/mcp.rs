//! `connector-host mcp --agent A`: an agent's tools as a local (stdio) MCP server,
//! bridged to a running host's `/mcp/agents/{A}` (see [`crate::mcp::stdio`]).

use clap::Args;
use reqwest::Url;

use super::client::{parse_base_url, resolve_token};
use super::{CliError, RemoteArgs};
use crate::config::{ENV_DATA_DIR, ENV_OPERATOR_TOKEN};
use crate::mcp::stdio::{self, BridgeConfig};

/// The environment variable holding the agent's token.
pub const ENV_AGENT_TOKEN: &str = "CONNECTOR_HOST_AGENT_TOKEN";

pub(crate) const HELP: &str = "\
Speaks MCP as newline-delimited JSON-RPC on stdin/stdout and forwards every message to the
host's Streamable HTTP endpoint {url}/mcp/agents/{agent}, relaying the host's notifications
(notifications/tools/list_changed) to stdout. For agent runtimes that only launch local MCP
servers. Logs and errors go to stderr; stdout carries only JSON-RPC.

Token: --token, else $CONNECTOR_HOST_AGENT_TOKEN (an agent token: `connector-host agents
token A`), else the operator token ($CONNECTOR_HOST_OPERATOR_TOKEN or <data dir>/operator-token).

Examples:
  connector-host mcp --agent ada --url http://127.0.0.1:8787 --token \"$ADA_TOKEN\"
  CONNECTOR_HOST_AGENT_TOKEN=... connector-host mcp --agent ada

MCP client configuration (e.g. a runtime's mcpServers entry):
  {\"command\": \"connector-host\", \"args\": [\"mcp\", \"--agent\", \"ada\"],
   \"env\": {\"CONNECTOR_HOST_URL\": \"http://127.0.0.1:8787\", \"CONNECTOR_HOST_AGENT_TOKEN\": \"...\"}}";

/// `connector-host mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// The agent whose effective tools to serve.
    #[arg(long, value_name = "AGENT")]
    pub agent: String,
}

/// The endpoint `base/mcp/agents/<agent>` (the agent id escaped; any path prefix of
/// `base` kept).
pub fn endpoint(base: &Url, agent: &str) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        path.extend(["mcp", "agents", agent]);
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

/// Runs the bridge until stdin ends.
pub fn run(remote: &RemoteArgs, args: McpArgs) -> Result<(), CliError> {
    crate::ids::check_id("agent", &args.agent).map_err(|e| CliError::usage(e.message))?;
    let base = parse_base_url(&remote.url)?;
    let env = |name| std::env::var(name).ok();
    let token = token(
        remote.token.as_deref(),
        env(ENV_AGENT_TOKEN).as_deref(),
        env(ENV_OPERATOR_TOKEN).as_deref(),
        env(ENV_DATA_DIR).as_deref(),
    );
    if token.is_none() {
        eprintln!(
            "connector-host mcp: no token (pass --token or set {ENV_AGENT_TOKEN}); the host will answer 401"
        );
    }
    stdio::run(BridgeConfig {
        endpoint: endpoint(&base, &args.agent),
        token,
    })
    .map_err(CliError::failed)
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
