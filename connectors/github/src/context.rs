//! Credentials and what an agent's container gets (`runtime_context`).

use std::fmt;

use connector_sdk::{AgentContext, Binding};
use serde::Serialize;

use crate::config::GithubConfig;

/// Where the binding file lives in an agent's workspace.
pub const BINDING_FILE: &str = ".spring/connectors/github/binding.json";

/// A bearer token for the GitHub API, from the host (installation) or an operator secret
/// (personal access token).
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// The bearer token.
    pub value: String,
    /// When it stops working (RFC 3339); `None` for personal access tokens.
    pub expires_at: Option<String>,
}

impl fmt::Debug for Token {
    // Never print the token itself.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("value", &"***")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// The binding's token: an installation token minted by the host when `installationId`
/// is set, the operator secret named by `patSecret` when that is set, otherwise none
/// (anonymous access). Errors carry the host's text.
pub fn token(config: &GithubConfig) -> Result<Option<Token>, String> {
    if let Some(id) = config.installation_id {
        let token = connector_sdk::github::installation_token(id)?;
        return Ok(Some(Token {
            value: token.token,
            expires_at: Some(token.expires_at),
        }));
    }
    if let Some(name) = &config.pat_secret {
        let Some(value) = connector_sdk::secrets::get(name) else {
            return Err(format!(
                "the secret `{name}` named by patSecret is not configured on this host \
                 (connectors.github.secrets.{name})"
            ));
        };
        return Ok(Some(Token {
            value,
            expires_at: None,
        }));
    }
    Ok(None)
}

/// The content of `binding.json`. Never holds the token.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BindingFile<'a> {
    owner: &'a str,
    repo: &'a str,
    installation_id: Option<u64>,
    reviewer: Option<&'a str>,
    owner_unit_id: &'a str,
    token_expires_at: Option<&'a str>,
}

/// The env vars and the binding file of an agent under the bound unit.
pub fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
    let config = GithubConfig::from_value(&binding.config)?;
    config.validate()?;
    let token = token(&config)?;
    Ok(build_context(&binding.unit, &config, token))
}

/// [`runtime_context`] once the token is known (separate so tests can supply one).
pub fn build_context(unit: &str, config: &GithubConfig, token: Option<Token>) -> AgentContext {
    let (owner, repo) = config.owner_and_name();
    let expires_at = token.as_ref().and_then(|t| t.expires_at.clone());
    let file = BindingFile {
        owner,
        repo,
        installation_id: config.installation_id,
        reviewer: config.reviewer.as_deref(),
        owner_unit_id: unit,
        token_expires_at: expires_at.as_deref(),
    };
    let mut content = serde_json::to_string_pretty(&file).unwrap_or_default();
    content.push('\n');

    let mut context = AgentContext::default()
        .env("SPRING_CONNECTOR_GITHUB_OWNER", owner)
        .env("SPRING_CONNECTOR_GITHUB_REPO", repo);
    if let Some(token) = token {
        context = context
            .env("SPRING_CONNECTOR_GITHUB_TOKEN", token.value.clone())
            .env("GITHUB_TOKEN", token.value);
    }
    if let Some(id) = config.installation_id {
        context = context.env("SPRING_CONNECTOR_GITHUB_INSTALLATION_ID", id.to_string());
        if let Some(expires_at) = expires_at {
            context = context.env("SPRING_CONNECTOR_GITHUB_TOKEN_EXPIRES_AT", expires_at);
        }
    }
    if let Some(reviewer) = &config.reviewer {
        context = context.env("SPRING_CONNECTOR_GITHUB_REVIEWER", reviewer.clone());
    }
    context.file(BINDING_FILE, content)
}
