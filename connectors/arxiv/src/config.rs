//! The binding configuration and its validation (`bind`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Where the arXiv API lives unless a binding says otherwise.
pub const DEFAULT_BASE_URL: &str = "https://export.arxiv.org";

/// Binding configuration of the arXiv connector. Everything is optional: `{}` binds the
/// public arXiv API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ArxivConfig {
    /// The API's base URL, `http(s)://host[:port][/path]`, for a mirror or a test
    /// server (default `https://export.arxiv.org`). The host's outbound policy still
    /// applies: only hosts the connector declares (`export.arxiv.org`) are reachable.
    #[schemars(regex(pattern = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"))]
    pub base_url: Option<String>,
}

impl ArxivConfig {
    /// Parses and validates a configuration document.
    pub fn from_value(config: &Value) -> Result<Self, String> {
        let config = ArxivConfig::deserialize(config)
            .map_err(|e| format!("invalid arXiv binding configuration: {e}"))?;
        if let Some(url) = &config.base_url {
            validate_base_url(url)?;
        }
        Ok(config)
    }

    /// The base URL without a trailing `/`.
    pub fn base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/')
    }
}

/// Checks `baseUrl`: an absolute http(s) URL with a host and no query or fragment.
pub fn validate_base_url(url: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "`baseUrl` `{url}` {why}: write an http(s) URL such as `{DEFAULT_BASE_URL}`, or \
             remove the field"
        ))
    };
    let rest = if let Some(rest) = url.strip_prefix("https://") {
        rest
    } else if let Some(rest) = url.strip_prefix("http://") {
        rest
    } else {
        return bad("does not start with http:// or https://");
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("contains whitespace");
    }
    if url.contains(['?', '#']) {
        return bad("has a query or fragment");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.starts_with(':') {
        return bad("has no host");
    }
    if authority.contains('@') {
        return bad("contains user info");
    }
    Ok(())
}
