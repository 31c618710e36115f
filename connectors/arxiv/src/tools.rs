//! The connector's tools: `arxiv.search` and `arxiv.fetch_abstract`.

use std::time::Duration;

use connector_sdk::http::{HttpError, Request, Response};
use connector_sdk::{CallContext, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::atom::{self, Entry};
use crate::config::ArxivConfig;
use crate::id;

/// The most results one search returns.
pub const MAX_RESULTS: u32 = 50;
/// Results per search unless asked otherwise.
pub const DEFAULT_RESULTS: u32 = 10;
/// Search summaries are cut to about this many characters.
pub const SEARCH_SUMMARY_CHARS: usize = 1_500;
/// The longest accepted query.
pub const MAX_QUERY_CHARS: usize = 1_000;
/// How long one request to arXiv may take to connect and to send each part.
const TIMEOUT: Duration = Duration::from_secs(20);
const USER_AGENT: &str = concat!("connector-host-arxiv/", env!("CARGO_PKG_VERSION"));

/// The order of search results.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    /// Best match first (the default).
    #[default]
    Relevance,
    /// Newest submission first.
    Submitted,
    /// Most recently updated first.
    Updated,
}

impl Sort {
    /// The API's `sortBy` value.
    pub fn api_value(self) -> &'static str {
        match self {
            Sort::Relevance => "relevance",
            Sort::Submitted => "submittedDate",
            Sort::Updated => "lastUpdatedDate",
        }
    }
}

/// Arguments of `arxiv.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// The arXiv search query. Plain words search everything; fields narrow it:
    /// `ti:` title, `au:` author, `abs:` abstract, `cat:` category, `all:` any, combined
    /// with `AND`, `OR`, `ANDNOT` and parentheses, e.g. `ti:transformer AND cat:cs.CL`.
    #[schemars(length(min = 1, max = 1000))]
    pub query: String,
    /// How many results to return (1–50, default 10).
    #[schemars(range(min = 1, max = 50))]
    pub max_results: Option<u32>,
    /// Result order: `relevance` (default), `submitted` (newest first) or `updated`
    /// (most recently updated first).
    pub sort: Option<Sort>,
}

/// Arguments of `arxiv.fetch_abstract`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchAbstractArgs {
    /// The arXiv id: new style `2101.00001` (optionally `2101.00001v2` or
    /// `arXiv:2101.00001`) or old style `hep-th/9901001`, `math.GT/0309136`.
    #[schemars(length(min = 1, max = 200))]
    pub id: String,
}

/// What `arxiv.search` returns.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct SearchResult {
    /// How many papers match in all (arXiv's count; more than `results` holds).
    pub total: u64,
    /// The papers of this page, summaries cut to about 1,500 characters.
    pub results: Vec<Entry>,
}

/// Percent-encodes a query parameter value (everything but RFC 3986 unreserved
/// characters).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The search URL under `base`.
pub fn search_url(base: &str, query: &str, max_results: u32, sort: Sort) -> String {
    format!(
        "{base}/api/query?search_query={}&start=0&max_results={max_results}&sortBy={}&sortOrder=descending",
        encode_component(query),
        sort.api_value()
    )
}

/// The lookup URL of one (normalised) id under `base`.
pub fn id_url(base: &str, id: &str) -> String {
    // A normalised id holds only letters, digits, `.`, `-` and `/`: all safe in a query.
    format!("{base}/api/query?id_list={id}")
}

/// `GET url` from arXiv; failures become messages a model can act on.
fn fetch(url: &str) -> Result<Response, ToolError> {
    let response = Request::get(url)
        .header("accept", "application/atom+xml")
        .header("user-agent", USER_AGENT)
        .timeout(TIMEOUT)
        .send()
        .map_err(http_error)?;
    if response.status == 200 {
        Ok(response)
    } else {
        Err(status_error(&response))
    }
}

/// Maps a request that got no answer.
pub fn http_error(e: HttpError) -> ToolError {
    match e {
        HttpError::Denied(m) => ToolError::Failed(format!(
            "the request to arXiv was denied by the host ({m}): the arXiv connector may only \
             reach export.arxiv.org; check the binding's `baseUrl` and the operator's \
             connectors.arxiv.allowed_hosts"
        )),
        HttpError::Transport(m) if m.contains("DestinationIpProhibited") => {
            ToolError::Failed(format!(
                "the request to arXiv was denied by the host: the address is private or \
                 loopback ({m}); check the binding's `baseUrl`"
            ))
        }
        HttpError::Transport(m) if m.to_ascii_lowercase().contains("timeout") => {
            ToolError::Failed(format!(
                "arXiv did not answer in time ({m}); try again later, or ask for fewer results"
            ))
        }
        HttpError::Transport(m) => {
            ToolError::Failed(format!("arXiv is unreachable ({m}); try again later"))
        }
        other => ToolError::Failed(format!("the request to arXiv failed: {other}")),
    }
}

/// Maps a non-200 answer. arXiv explains a 400 in an Atom error entry; that text is kept.
pub fn status_error(response: &Response) -> ToolError {
    let status = response.status;
    let explanation = atom::parse_feed(&response.text())
        .ok()
        .and_then(|f| f.entries.into_iter().find(Entry::is_error))
        .map(|e| e.summary)
        .filter(|s| !s.is_empty());
    match (status, explanation) {
        (400, Some(why)) => ToolError::Failed(format!(
            "arXiv refused the request (HTTP 400): {why}; check the query syntax (for \
             example `ti:transformer AND cat:cs.CL`)"
        )),
        (400..=499, _) => ToolError::Failed(format!(
            "arXiv refused the request (HTTP {status}); check the arguments, or try again \
             later if it persists"
        )),
        _ => ToolError::Failed(format!(
            "arXiv is unreachable or refused the request (HTTP {status}); try again later"
        )),
    }
}

fn parse(response: &Response) -> Result<atom::Feed, ToolError> {
    atom::parse_feed(&response.text()).map_err(|e| {
        ToolError::Failed(format!(
            "arXiv's answer is not a readable Atom feed ({e}); try again later"
        ))
    })
}

fn config(ctx: &CallContext) -> Result<ArxivConfig, ToolError> {
    ArxivConfig::from_value(&ctx.binding.config).map_err(ToolError::Failed)
}

/// Turns a search feed into the tool's result.
pub fn search_result(feed: atom::Feed) -> Result<SearchResult, ToolError> {
    if let Some(error) = feed.entries.iter().find(|e| e.is_error()) {
        return Err(ToolError::Failed(format!(
            "arXiv could not run the query: {}; check the query syntax (for example \
             `ti:transformer AND cat:cs.CL`)",
            error.summary
        )));
    }
    let mut results = feed.entries;
    for entry in &mut results {
        entry.truncate_summary(SEARCH_SUMMARY_CHARS);
    }
    Ok(SearchResult {
        total: feed.total.unwrap_or(results.len() as u64),
        results,
    })
}

/// Picks the one paper of an id lookup; `id` is the normalised id asked for.
pub fn abstract_result(feed: atom::Feed, id: &str) -> Result<Entry, ToolError> {
    match feed.entries.into_iter().next() {
        Some(entry) if !entry.is_error() => Ok(entry),
        _ => Err(ToolError::Failed(format!(
            "no arXiv paper with id `{id}`; check the id (new style 2101.00001, old style \
             hep-th/9901001)"
        ))),
    }
}

/// `arxiv.search`.
pub fn search(ctx: &CallContext, args: SearchArgs) -> Result<SearchResult, ToolError> {
    let query = args.query.trim();
    if query.is_empty() {
        return Err(ToolError::invalid_arguments(
            "`query` is empty: write search words, e.g. `diffusion models` or \
             `au:hinton AND ti:capsule`",
        ));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(ToolError::invalid_arguments(format!(
            "`query` is longer than {MAX_QUERY_CHARS} characters: shorten it"
        )));
    }
    let max_results = args.max_results.unwrap_or(DEFAULT_RESULTS);
    if !(1..=MAX_RESULTS).contains(&max_results) {
        return Err(ToolError::invalid_arguments(format!(
            "`max_results` must be between 1 and {MAX_RESULTS}"
        )));
    }
    let config = config(ctx)?;
    let url = search_url(
        config.base_url(),
        query,
        max_results,
        args.sort.unwrap_or_default(),
    );
    let response = fetch(&url)?;
    search_result(parse(&response)?)
}

/// `arxiv.fetch_abstract`.
pub fn fetch_abstract(ctx: &CallContext, args: FetchAbstractArgs) -> Result<Entry, ToolError> {
    let id = id::normalize(&args.id).map_err(ToolError::InvalidArguments)?;
    let config = config(ctx)?;
    let response = fetch(&id_url(config.base_url(), &id))?;
    abstract_result(parse(&response)?, &id)
}
