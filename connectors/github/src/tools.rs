//! The connector's tools.

use connector_sdk::http::{HttpError, Request, Response};
use connector_sdk::{CallContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::GithubConfig;
use crate::context::token;
use crate::events::{body_text, Text};

/// The GitHub REST API.
pub const API_BASE: &str = "https://api.github.com";
/// The REST API version requested.
const API_VERSION: &str = "2022-11-28";

/// Arguments of `github.get_issue`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetIssueArgs {
    /// The issue or pull request number in the bound repository.
    #[schemars(range(min = 1))]
    pub number: u64,
}

/// `GET` a GitHub REST path with the binding's credentials; non-2xx answers become tool
/// errors carrying GitHub's message.
fn api_get(config: &GithubConfig, path: &str) -> Result<Response, ToolError> {
    let mut request = Request::get(format!("{API_BASE}{path}"))
        .header("accept", "application/vnd.github+json")
        .header("user-agent", "connector-host")
        .header("x-github-api-version", API_VERSION);
    if let Some(token) = token(config).map_err(ToolError::Failed)? {
        request = request.header("authorization", format!("Bearer {}", token.value));
    }
    let response = request.send().map_err(|e| match e {
        HttpError::Denied(m) => ToolError::Failed(format!(
            "the host does not allow requests to api.github.com ({m}); check \
             connectors.github.allowed_hosts"
        )),
        other => ToolError::from(other),
    })?;
    if response.is_success() {
        Ok(response)
    } else {
        Err(status_error(&response))
    }
}

/// GitHub's error body: `{"message": ..., "documentation_url": ...}`.
#[derive(Deserialize)]
struct ApiError {
    message: String,
}

/// Maps a non-2xx answer: 401/403 are [`ToolError::Unauthorized`], everything else
/// [`ToolError::Failed`]; both carry GitHub's message.
pub fn status_error(response: &Response) -> ToolError {
    let message = match serde_json::from_slice::<ApiError>(&response.body) {
        Ok(e) => e.message,
        Err(_) => {
            let text = response.text();
            let text = text.trim();
            match text.char_indices().nth(300) {
                Some((end, _)) => format!("{}…", &text[..end]),
                None => text.to_owned(),
            }
        }
    };
    let status = response.status;
    match status {
        401 | 403 => ToolError::Unauthorized(format!("GitHub answered {status}: {message}")),
        _ => ToolError::Failed(format!("GitHub answered {status}: {message}")),
    }
}

#[derive(Deserialize)]
struct ApiUser<'a> {
    #[serde(borrow)]
    login: Text<'a>,
}

#[derive(Deserialize)]
struct ApiLabel<'a> {
    #[serde(borrow)]
    name: Text<'a>,
}

/// The fields of GitHub's issue object that the summary uses.
#[derive(Deserialize)]
struct ApiIssue<'a> {
    number: u64,
    #[serde(borrow)]
    title: Text<'a>,
    #[serde(borrow)]
    state: Text<'a>,
    #[serde(borrow, default)]
    state_reason: Option<Text<'a>>,
    #[serde(borrow)]
    user: Option<ApiUser<'a>>,
    #[serde(borrow, default)]
    labels: Vec<ApiLabel<'a>>,
    #[serde(borrow, default)]
    assignees: Vec<ApiUser<'a>>,
    #[serde(default)]
    comments: u64,
    #[serde(default)]
    pull_request: Option<serde::de::IgnoredAny>,
    #[serde(borrow)]
    body: Option<Text<'a>>,
    #[serde(borrow)]
    html_url: Text<'a>,
    #[serde(borrow)]
    created_at: Option<Text<'a>>,
    #[serde(borrow)]
    updated_at: Option<Text<'a>>,
    #[serde(borrow)]
    closed_at: Option<Text<'a>>,
}

/// What `github.get_issue` returns.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IssueSummary {
    /// `owner/name`.
    pub repository: String,
    /// The issue number.
    pub number: u64,
    /// The title.
    pub title: String,
    /// `open` or `closed`.
    pub state: String,
    /// `completed`, `not_planned`, `reopened`, or none.
    pub state_reason: Option<String>,
    /// The author's login.
    pub author: Option<String>,
    /// Label names.
    pub labels: Vec<String>,
    /// Assignee logins.
    pub assignees: Vec<String>,
    /// The number of comments.
    pub comments: u64,
    /// Whether the issue is a pull request.
    pub is_pull_request: bool,
    /// The body, cut to about 4,000 characters.
    pub body: Option<String>,
    /// Whether the body was cut.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub body_truncated: bool,
    /// The web page.
    pub url: String,
    /// RFC 3339.
    pub created_at: Option<String>,
    /// RFC 3339.
    pub updated_at: Option<String>,
    /// RFC 3339.
    pub closed_at: Option<String>,
}

/// Turns GitHub's issue JSON into the compact summary.
pub fn summarize_issue(repository: &str, body: &[u8]) -> Result<IssueSummary, ToolError> {
    let issue: ApiIssue<'_> = serde_json::from_slice(body)
        .map_err(|e| ToolError::failed(format!("GitHub's answer is not an issue: {e}")))?;
    let (body, body_truncated) = body_text(issue.body.as_ref());
    let owned = |t: &Option<Text<'_>>| t.as_ref().map(|t| t.as_str().to_owned());
    Ok(IssueSummary {
        repository: repository.to_owned(),
        number: issue.number,
        title: issue.title.as_str().to_owned(),
        state: issue.state.as_str().to_owned(),
        state_reason: owned(&issue.state_reason),
        author: issue.user.map(|u| u.login.as_str().to_owned()),
        labels: issue
            .labels
            .iter()
            .map(|l| l.name.as_str().to_owned())
            .collect(),
        assignees: issue
            .assignees
            .iter()
            .map(|u| u.login.as_str().to_owned())
            .collect(),
        comments: issue.comments,
        is_pull_request: issue.pull_request.is_some(),
        body,
        body_truncated,
        url: issue.html_url.as_str().to_owned(),
        created_at: owned(&issue.created_at),
        updated_at: owned(&issue.updated_at),
        closed_at: owned(&issue.closed_at),
    })
}

/// `github.get_issue`: one issue (or pull request) of the bound repository.
pub fn get_issue(ctx: &CallContext, args: GetIssueArgs) -> Result<IssueSummary, ToolError> {
    if args.number == 0 {
        return Err(ToolError::invalid_arguments(
            "`number` must be a positive issue number",
        ));
    }
    let config = GithubConfig::from_value(&ctx.binding.config).map_err(ToolError::Failed)?;
    config.validate().map_err(ToolError::Failed)?;
    let (owner, repo) = config.owner_and_name();
    let response = api_get(
        &config,
        &format!("/repos/{owner}/{repo}/issues/{}", args.number),
    )
    .map_err(|e| match e {
        ToolError::Failed(m) if m.starts_with("GitHub answered 404") => ToolError::Failed(format!(
            "{m} (issue #{} does not exist in {owner}/{repo}, or the binding's \
                     credentials cannot see it)",
            args.number
        )),
        other => other,
    })?;
    summarize_issue(&config.repo, &response.body)
}
