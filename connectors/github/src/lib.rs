//! The GitHub connector, bundled with the host (slug and namespace `github`).
//!
//! - **Bindings** name one repository (`repo: "owner/name"`) and optionally how agents
//!   authenticate: a GitHub App installation (`installationId`; the host mints
//!   short-lived installation tokens, the App key never enters the guest) or the name of
//!   an operator secret holding a personal access token (`patSecret`). Label and author
//!   filters (`includeLabels`, `excludeLabels`, `includeAuthors`) narrow what a unit
//!   receives.
//! - **Webhooks** (`github-hmac-sha256`): `issues`, `issue_comment`, `pull_request`,
//!   `pull_request_review`, `pull_request_review_comment`, `pull_request_review_thread`,
//!   `push`, `installation` and `installation_repositories` deliveries each become one
//!   message with a compact payload (see [`events`]); `ping` and other events become none.
//!   Repository events route as `repo:<owner/name lower-cased>`, installation events as
//!   `installation:<id>`.
//! - **Runtime context**: `SPRING_CONNECTOR_GITHUB_*` variables, `GITHUB_TOKEN`, and
//!   `.spring/connectors/github/binding.json` (never the token); see [`context`].
//! - **Tools**: `github.get_issue`.

use connector_sdk::{AgentContext, Binding, Connector, Manifest, Message, Tool, WebhookScheme};
use serde_json::Value;

pub mod config;
pub mod context;
pub mod events;
pub mod filter;
pub mod tools;

pub use config::GithubConfig;

/// The only host the connector talks to.
pub const API_HOST: &str = "api.github.com";

/// The connector.
pub struct Github;

impl Connector for Github {
    fn manifest() -> Manifest {
        Manifest::new("github")
            .display_name("GitHub")
            .description(
                "GitHub repositories: issue, pull request, review and push webhooks become \
                 unit messages; agents get repository credentials and tools.",
            )
            .version(env!("CARGO_PKG_VERSION"))
            .config::<GithubConfig>()
            .webhook(WebhookScheme::GithubHmacSha256)
            .allowed_host(API_HOST)
            .tool(
                Tool::new(
                    "get_issue",
                    "Fetch one issue or pull request of the bound repository by number: \
                     title, state, author, labels, assignees, comment count and body.",
                    tools::get_issue,
                )
                .read_only()
                .idempotent()
                .open_world(),
            )
    }

    fn bind(config: &Value) -> Result<Vec<String>, String> {
        let config = GithubConfig::from_value(config)?;
        config.validate()?;
        Ok(config.routing_keys())
    }

    fn translate_webhook(hook: &connector_sdk::Webhook) -> Result<Vec<Message>, String> {
        events::translate(hook)
    }

    fn accept(binding: &Binding, message: &Message) -> bool {
        filter::accept(binding, message)
    }

    fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
        context::runtime_context(binding)
    }
}

connector_sdk::export!(Github);

#[cfg(test)]
mod tests;
