//! Webhook deliveries into unit messages (`translate_webhook`).
//!
//! Each handled event becomes exactly one message. The body is deserialized into typed
//! structs holding only the fields the compact payload needs; strings borrow from the
//! body whenever they contain no escapes, and everything else in GitHub's (large) payload
//! is skipped without being materialised. A 25 KiB `pull_request` delivery therefore costs
//! one pass over the bytes and a handful of small allocations.

use std::borrow::Cow;
use std::fmt;

use connector_sdk::{Message, Webhook};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::config::{installation_route, repo_route};

/// Issue, pull request, comment and review bodies are cut to this many characters.
pub const MAX_BODY_CHARS: usize = 4_000;
/// A push message lists at most this many commits.
pub const MAX_PUSH_COMMITS: usize = 20;

/// The events this connector turns into messages.
pub const HANDLED_EVENTS: [&str; 9] = [
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "pull_request_review_thread",
    "push",
    "installation",
    "installation_repositories",
];

/// Turns one verified delivery into messages: one for a handled event, none for `ping`
/// and every other event. A body that is not GitHub's JSON is an error.
pub fn translate(hook: &Webhook) -> Result<Vec<Message>, String> {
    let Some(event) = hook.header("x-github-event") else {
        let message = "the delivery has no X-GitHub-Event header: it does not come from a \
                       GitHub webhook";
        return Err(message.to_owned());
    };
    if !HANDLED_EVENTS.contains(&event) {
        // `ping` and everything this connector does not translate: nothing to deliver.
        return Ok(Vec::new());
    }
    let body = json_body(hook)?;
    let not_json = |e: serde_json::Error| {
        if e.is_data() {
            format!("the `{event}` delivery does not have the shape GitHub documents: {e}")
        } else {
            format!(
                "the `{event}` delivery is not JSON ({e}); set the webhook's content type to \
                 application/json"
            )
        }
    };
    let body: &[u8] = &body;
    let message = match event {
        "issues" => issues(serde_json::from_slice(body).map_err(not_json)?),
        "issue_comment" => issue_comment(serde_json::from_slice(body).map_err(not_json)?),
        "pull_request" => pull_request(serde_json::from_slice(body).map_err(not_json)?),
        "pull_request_review" => review(serde_json::from_slice(body).map_err(not_json)?),
        "pull_request_review_comment" => {
            review_comment(serde_json::from_slice(body).map_err(not_json)?)
        }
        "pull_request_review_thread" => {
            review_thread(serde_json::from_slice(body).map_err(not_json)?)
        }
        "push" => push(serde_json::from_slice(body).map_err(not_json)?),
        "installation" => installation(serde_json::from_slice(body).map_err(not_json)?),
        "installation_repositories" => {
            installation_repositories(serde_json::from_slice(body).map_err(not_json)?)
        }
        _ => unreachable!("checked against HANDLED_EVENTS"),
    }
    .map_err(|e| format!("cannot summarise the `{event}` delivery: {e}"))?;
    Ok(vec![message])
}

/// The JSON document of a delivery. GitHub sends it raw (`application/json`) or, when the
/// webhook's content type is `application/x-www-form-urlencoded`, as the form field
/// `payload`.
fn json_body(hook: &Webhook) -> Result<Cow<'_, [u8]>, String> {
    let form = hook.header("content-type").is_some_and(|ct| {
        ct.trim_start()
            .to_ascii_lowercase()
            .starts_with("application/x-www-form-urlencoded")
    });
    if !form {
        return Ok(Cow::Borrowed(&hook.body));
    }
    for field in hook.body.split(|&b| b == b'&') {
        if let Some(value) = field.strip_prefix(b"payload=") {
            return Ok(Cow::Owned(percent_decode(value)));
        }
    }
    Err(
        "the form-encoded delivery has no `payload` field; set the webhook's content type \
         to application/json"
            .to_owned(),
    )
}

/// Decodes `application/x-www-form-urlencoded` bytes (`+` is a space).
fn percent_decode(input: &[u8]) -> Vec<u8> {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < input.len() => match (hex(input[i + 1]), hex(input[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Borrowed strings

/// A JSON string that borrows from the body unless it contains escapes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl Text<'_> {
    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// A user-written body: `\r\n` becomes `\n`, and it is cut to [`MAX_BODY_CHARS`]
/// characters (then ending in `…`). Returns the text and whether it was cut.
pub(crate) fn body_text(body: Option<&Text<'_>>) -> (Option<String>, bool) {
    let Some(body) = body.map(Text::as_str) else {
        return (None, false);
    };
    let (cut, truncated) = match body.char_indices().nth(MAX_BODY_CHARS) {
        Some((end, _)) => (&body[..end], true),
        None => (body, false),
    };
    let mut out = if cut.contains('\r') {
        cut.replace("\r\n", "\n")
    } else {
        cut.to_owned()
    };
    if truncated {
        out.push('…');
    }
    (Some(out), truncated)
}

/// The first line of a commit message.
fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or_default().trim_end()
}

// ---------------------------------------------------------------------------------------
// What is read from GitHub's payloads (only the fields used)

#[derive(Deserialize)]
struct Repository<'a> {
    #[serde(borrow)]
    full_name: Text<'a>,
}

#[derive(Deserialize)]
struct User<'a> {
    #[serde(borrow)]
    login: Text<'a>,
}

#[derive(Deserialize)]
struct Label<'a> {
    #[serde(borrow)]
    name: Text<'a>,
}

#[derive(Deserialize)]
struct Issue<'a> {
    number: u64,
    #[serde(borrow)]
    title: Text<'a>,
    #[serde(borrow)]
    state: Option<Text<'a>>,
    #[serde(borrow)]
    user: Option<User<'a>>,
    #[serde(borrow, default)]
    labels: Vec<Label<'a>>,
    #[serde(borrow, default)]
    assignees: Vec<User<'a>>,
    #[serde(borrow)]
    body: Option<Text<'a>>,
    #[serde(borrow)]
    html_url: Option<Text<'a>>,
    /// Present (an object) when the issue is a pull request.
    #[serde(default)]
    pull_request: Option<de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Branch<'a> {
    #[serde(borrow, rename = "ref")]
    name: Text<'a>,
}

#[derive(Deserialize)]
struct PullRequest<'a> {
    number: u64,
    #[serde(borrow)]
    title: Text<'a>,
    #[serde(borrow)]
    state: Option<Text<'a>>,
    #[serde(default)]
    draft: Option<bool>,
    #[serde(default)]
    merged: Option<bool>,
    #[serde(borrow)]
    user: Option<User<'a>>,
    #[serde(borrow, default)]
    labels: Vec<Label<'a>>,
    #[serde(borrow)]
    base: Option<Branch<'a>>,
    #[serde(borrow)]
    head: Option<Branch<'a>>,
    #[serde(borrow)]
    body: Option<Text<'a>>,
    #[serde(borrow)]
    html_url: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Comment<'a> {
    #[serde(borrow)]
    user: Option<User<'a>>,
    #[serde(borrow)]
    body: Option<Text<'a>>,
    #[serde(borrow)]
    html_url: Option<Text<'a>>,
    #[serde(borrow, default)]
    path: Option<Text<'a>>,
    #[serde(default)]
    line: Option<u64>,
}

#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    user: Option<User<'a>>,
    #[serde(borrow)]
    body: Option<Text<'a>>,
    #[serde(borrow)]
    state: Option<Text<'a>>,
    #[serde(borrow)]
    html_url: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Thread<'a> {
    #[serde(borrow, default)]
    comments: Vec<Comment<'a>>,
}

#[derive(Deserialize)]
struct Installation<'a> {
    id: u64,
    #[serde(borrow, default)]
    account: Option<Account<'a>>,
}

/// The account an App is installed on: a user or organization (`login`) or an
/// enterprise (`slug`).
#[derive(Deserialize)]
struct Account<'a> {
    #[serde(borrow, default)]
    login: Option<Text<'a>>,
    #[serde(borrow, default)]
    slug: Option<Text<'a>>,
}

fn account<'s>(account: &'s Option<Account<'_>>) -> Option<&'s str> {
    account
        .as_ref()
        .and_then(|a| text(&a.login).or(text(&a.slug)))
}

#[derive(Deserialize)]
struct IssuesEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    issue: Issue<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
    #[serde(borrow, default)]
    label: Option<Label<'a>>,
}

#[derive(Deserialize)]
struct IssueCommentEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    issue: Issue<'a>,
    #[serde(borrow)]
    comment: Comment<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct PullRequestEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    pull_request: PullRequest<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
    #[serde(borrow, default)]
    label: Option<Label<'a>>,
    #[serde(borrow, default)]
    requested_reviewer: Option<User<'a>>,
}

#[derive(Deserialize)]
struct ReviewEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    review: Review<'a>,
    #[serde(borrow)]
    pull_request: PullRequest<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct ReviewCommentEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    comment: Comment<'a>,
    #[serde(borrow)]
    pull_request: PullRequest<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct ReviewThreadEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    thread: Thread<'a>,
    #[serde(borrow)]
    pull_request: PullRequest<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct Pusher<'a> {
    #[serde(borrow)]
    name: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct CommitAuthor<'a> {
    #[serde(borrow, default)]
    username: Option<Text<'a>>,
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct Commit<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    message: Text<'a>,
    #[serde(borrow)]
    author: Option<CommitAuthor<'a>>,
}

#[derive(Deserialize)]
struct PushEvent<'a> {
    #[serde(borrow, rename = "ref")]
    git_ref: Text<'a>,
    #[serde(borrow)]
    before: Option<Text<'a>>,
    #[serde(borrow)]
    after: Option<Text<'a>>,
    #[serde(default)]
    created: bool,
    #[serde(default)]
    deleted: bool,
    #[serde(default)]
    forced: bool,
    #[serde(borrow)]
    compare: Option<Text<'a>>,
    #[serde(borrow, default)]
    commits: Vec<Commit<'a>>,
    #[serde(borrow)]
    pusher: Option<Pusher<'a>>,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct InstallationEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    installation: Installation<'a>,
    #[serde(borrow, default)]
    repositories: Option<Vec<Repository<'a>>>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

#[derive(Deserialize)]
struct InstallationRepositoriesEvent<'a> {
    #[serde(borrow)]
    action: Option<Text<'a>>,
    #[serde(borrow)]
    installation: Installation<'a>,
    #[serde(borrow, default)]
    repository_selection: Option<Text<'a>>,
    #[serde(borrow, default)]
    repositories_added: Vec<Repository<'a>>,
    #[serde(borrow, default)]
    repositories_removed: Vec<Repository<'a>>,
    #[serde(borrow)]
    sender: Option<User<'a>>,
}

// ---------------------------------------------------------------------------------------
// What messages carry (compact payloads)

fn login<'s>(user: &'s Option<User<'_>>) -> Option<&'s str> {
    user.as_ref().map(|u| u.login.as_str())
}

fn names<'s>(labels: &'s [Label<'_>]) -> Vec<&'s str> {
    labels.iter().map(|l| l.name.as_str()).collect()
}

fn full_names<'s>(repos: &'s [Repository<'_>]) -> Vec<&'s str> {
    repos.iter().map(|r| r.full_name.as_str()).collect()
}

fn text<'s>(t: &'s Option<Text<'_>>) -> Option<&'s str> {
    t.as_ref().map(Text::as_str)
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct IssuePayload<'s> {
    action: Option<&'s str>,
    repository: &'s str,
    number: u64,
    title: &'s str,
    state: Option<&'s str>,
    author: Option<&'s str>,
    labels: Vec<&'s str>,
    assignees: Vec<&'s str>,
    body: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    body_truncated: bool,
    url: Option<&'s str>,
    sender: Option<&'s str>,
    /// The label added or removed (`labeled` / `unlabeled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PullRequestPayload<'s> {
    action: Option<&'s str>,
    repository: &'s str,
    number: u64,
    title: &'s str,
    state: Option<&'s str>,
    draft: bool,
    merged: bool,
    author: Option<&'s str>,
    labels: Vec<&'s str>,
    base: Option<&'s str>,
    head: Option<&'s str>,
    body: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    body_truncated: bool,
    url: Option<&'s str>,
    sender: Option<&'s str>,
    /// The label added or removed (`labeled` / `unlabeled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<&'s str>,
    /// The reviewer asked for (`review_requested` / `review_request_removed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    requested_reviewer: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CommentPayload<'s> {
    action: Option<&'s str>,
    repository: &'s str,
    number: u64,
    title: &'s str,
    is_pull_request: bool,
    author: Option<&'s str>,
    /// The labels of the issue or pull request commented on.
    labels: Vec<&'s str>,
    body: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    body_truncated: bool,
    url: Option<&'s str>,
    /// The file a review comment is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<&'s str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    sender: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewPayload<'s> {
    action: Option<&'s str>,
    repository: &'s str,
    number: u64,
    title: &'s str,
    /// `approved`, `changes_requested`, `commented`, `dismissed`.
    state: Option<&'s str>,
    author: Option<&'s str>,
    /// The labels of the pull request.
    labels: Vec<&'s str>,
    body: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    body_truncated: bool,
    url: Option<&'s str>,
    sender: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewThreadPayload<'s> {
    action: Option<&'s str>,
    repository: &'s str,
    number: u64,
    title: &'s str,
    resolved: bool,
    comments: usize,
    /// Who opened the thread (its first comment).
    author: Option<&'s str>,
    /// The labels of the pull request.
    labels: Vec<&'s str>,
    path: Option<&'s str>,
    url: Option<&'s str>,
    sender: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CommitSummary<'s> {
    id: &'s str,
    message: &'s str,
    author: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushPayload<'s> {
    repository: &'s str,
    #[serde(rename = "ref")]
    git_ref: &'s str,
    before: Option<&'s str>,
    after: Option<&'s str>,
    created: bool,
    deleted: bool,
    forced: bool,
    pusher: Option<&'s str>,
    /// The first [`MAX_PUSH_COMMITS`] commits.
    commits: Vec<CommitSummary<'s>>,
    /// How many commits the push carried (may exceed `commits`).
    commit_count: usize,
    compare: Option<&'s str>,
    sender: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstallationPayload<'s> {
    action: Option<&'s str>,
    installation_id: u64,
    account: Option<&'s str>,
    repositories: Vec<&'s str>,
    sender: Option<&'s str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstallationRepositoriesPayload<'s> {
    action: Option<&'s str>,
    installation_id: u64,
    account: Option<&'s str>,
    repository_selection: Option<&'s str>,
    added: Vec<&'s str>,
    removed: Vec<&'s str>,
    sender: Option<&'s str>,
}

fn kind(event: &str, action: Option<&Text<'_>>) -> String {
    match action {
        Some(action) => format!("{event}.{}", action.as_str()),
        None => event.to_owned(),
    }
}

/// `github:<owner>/<repo>#<number>`, lower-cased like the route so that one thread keeps
/// one key.
fn thread_key(full_name: &str, number: u64) -> String {
    format!("github:{}#{number}", full_name.to_ascii_lowercase())
}

fn to_value<T: Serialize>(payload: &T) -> Result<Value, String> {
    serde_json::to_value(payload).map_err(|e| e.to_string())
}

fn issues(e: IssuesEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let issue = &e.issue;
    let (body, body_truncated) = body_text(issue.body.as_ref());
    let payload = IssuePayload {
        action: text(&e.action),
        repository,
        number: issue.number,
        title: issue.title.as_str(),
        state: text(&issue.state),
        author: login(&issue.user),
        labels: names(&issue.labels),
        assignees: issue.assignees.iter().map(|u| u.login.as_str()).collect(),
        body,
        body_truncated,
        url: text(&issue.html_url),
        sender: login(&e.sender),
        label: e.label.as_ref().map(|l| l.name.as_str()),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("issues", e.action.as_ref()),
        thread_key: Some(thread_key(repository, issue.number)),
        payload: to_value(&payload)?,
    })
}

fn issue_comment(e: IssueCommentEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let (body, body_truncated) = body_text(e.comment.body.as_ref());
    let payload = CommentPayload {
        action: text(&e.action),
        repository,
        number: e.issue.number,
        title: e.issue.title.as_str(),
        is_pull_request: e.issue.pull_request.is_some(),
        author: login(&e.comment.user),
        labels: names(&e.issue.labels),
        body,
        body_truncated,
        url: text(&e.comment.html_url),
        path: None,
        line: None,
        sender: login(&e.sender),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("issue_comment", e.action.as_ref()),
        thread_key: Some(thread_key(repository, e.issue.number)),
        payload: to_value(&payload)?,
    })
}

fn pull_request(e: PullRequestEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let pr = &e.pull_request;
    let (body, body_truncated) = body_text(pr.body.as_ref());
    let payload = PullRequestPayload {
        action: text(&e.action),
        repository,
        number: pr.number,
        title: pr.title.as_str(),
        state: text(&pr.state),
        draft: pr.draft.unwrap_or(false),
        merged: pr.merged.unwrap_or(false),
        author: login(&pr.user),
        labels: names(&pr.labels),
        base: pr.base.as_ref().map(|b| b.name.as_str()),
        head: pr.head.as_ref().map(|b| b.name.as_str()),
        body,
        body_truncated,
        url: text(&pr.html_url),
        sender: login(&e.sender),
        label: e.label.as_ref().map(|l| l.name.as_str()),
        requested_reviewer: login(&e.requested_reviewer),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("pull_request", e.action.as_ref()),
        thread_key: Some(thread_key(repository, pr.number)),
        payload: to_value(&payload)?,
    })
}

fn review(e: ReviewEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let pr = &e.pull_request;
    let (body, body_truncated) = body_text(e.review.body.as_ref());
    let payload = ReviewPayload {
        action: text(&e.action),
        repository,
        number: pr.number,
        title: pr.title.as_str(),
        state: text(&e.review.state),
        author: login(&e.review.user),
        labels: names(&pr.labels),
        body,
        body_truncated,
        url: text(&e.review.html_url),
        sender: login(&e.sender),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("pull_request_review", e.action.as_ref()),
        thread_key: Some(thread_key(repository, pr.number)),
        payload: to_value(&payload)?,
    })
}

fn review_comment(e: ReviewCommentEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let pr = &e.pull_request;
    let (body, body_truncated) = body_text(e.comment.body.as_ref());
    let payload = CommentPayload {
        action: text(&e.action),
        repository,
        number: pr.number,
        title: pr.title.as_str(),
        is_pull_request: true,
        author: login(&e.comment.user),
        labels: names(&pr.labels),
        body,
        body_truncated,
        url: text(&e.comment.html_url),
        path: text(&e.comment.path),
        line: e.comment.line,
        sender: login(&e.sender),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("pull_request_review_comment", e.action.as_ref()),
        thread_key: Some(thread_key(repository, pr.number)),
        payload: to_value(&payload)?,
    })
}

fn review_thread(e: ReviewThreadEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let pr = &e.pull_request;
    let first = e.thread.comments.first();
    let payload = ReviewThreadPayload {
        action: text(&e.action),
        repository,
        number: pr.number,
        title: pr.title.as_str(),
        resolved: e.action.as_ref().is_some_and(|a| a.as_str() == "resolved"),
        comments: e.thread.comments.len(),
        author: first.and_then(|c| login(&c.user)),
        labels: names(&pr.labels),
        path: first.and_then(|c| text(&c.path)),
        url: first.and_then(|c| text(&c.html_url)),
        sender: login(&e.sender),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: kind("pull_request_review_thread", e.action.as_ref()),
        thread_key: Some(thread_key(repository, pr.number)),
        payload: to_value(&payload)?,
    })
}

fn push(e: PushEvent<'_>) -> Result<Message, String> {
    let repository = e.repository.full_name.as_str();
    let commits = e
        .commits
        .iter()
        .take(MAX_PUSH_COMMITS)
        .map(|c| {
            let id = c.id.as_str();
            CommitSummary {
                id: id.get(..7).unwrap_or(id),
                message: first_line(c.message.as_str()),
                author: c
                    .author
                    .as_ref()
                    .and_then(|a| text(&a.username).or(text(&a.name))),
            }
        })
        .collect();
    let payload = PushPayload {
        repository,
        git_ref: e.git_ref.as_str(),
        before: text(&e.before),
        after: text(&e.after),
        created: e.created,
        deleted: e.deleted,
        forced: e.forced,
        pusher: e.pusher.as_ref().and_then(|p| text(&p.name)),
        commits,
        commit_count: e.commits.len(),
        compare: text(&e.compare),
        sender: login(&e.sender),
    };
    Ok(Message {
        route: repo_route(repository),
        kind: "push".to_owned(),
        thread_key: None,
        payload: to_value(&payload)?,
    })
}

fn installation(e: InstallationEvent<'_>) -> Result<Message, String> {
    let payload = InstallationPayload {
        action: text(&e.action),
        installation_id: e.installation.id,
        account: account(&e.installation.account),
        repositories: e
            .repositories
            .as_deref()
            .map(full_names)
            .unwrap_or_default(),
        sender: login(&e.sender),
    };
    Ok(Message {
        route: installation_route(e.installation.id),
        kind: kind("installation", e.action.as_ref()),
        thread_key: None,
        payload: to_value(&payload)?,
    })
}

fn installation_repositories(e: InstallationRepositoriesEvent<'_>) -> Result<Message, String> {
    let payload = InstallationRepositoriesPayload {
        action: text(&e.action),
        installation_id: e.installation.id,
        account: account(&e.installation.account),
        repository_selection: text(&e.repository_selection),
        added: full_names(&e.repositories_added),
        removed: full_names(&e.repositories_removed),
        sender: login(&e.sender),
    };
    Ok(Message {
        route: installation_route(e.installation.id),
        kind: kind("installation_repositories", e.action.as_ref()),
        thread_key: None,
        payload: to_value(&payload)?,
    })
}
