//! The binding configuration and its validation (`bind`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// Binding configuration of the GitHub connector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GithubConfig {
    /// The repository, written `owner/name` (for example `octo-org/hello-world`).
    pub repo: String,
    /// The GitHub App installation that grants access to the repository (the number at
    /// the end of `https://github.com/settings/installations/<id>`). Agents then get a
    /// short-lived installation token minted by the host. Do not combine with `patSecret`.
    /// Marked `x-github-installation`: the host mints tokens only for installations named
    /// in such a field by the operator's config.
    #[schemars(range(min = 1), extend("x-github-installation" = true))]
    pub installation_id: Option<u64>,
    /// The NAME of an operator secret `connectors.github.secrets.<name>` holding a
    /// personal access token (never the token itself). Do not combine with
    /// `installationId`.
    pub pat_secret: Option<String>,
    /// The GitHub login agents should ask for reviews, handed to them as
    /// `SPRING_CONNECTOR_GITHUB_REVIEWER`.
    pub reviewer: Option<String>,
    /// Deliver only issues and pull requests (and their comments and reviews) carrying at
    /// least one of these labels. Case-insensitive; `*` matches any label and `prefix*`
    /// any label starting with `prefix`. Absent or empty: no label requirement.
    pub include_labels: Option<Vec<String>>,
    /// Drop issues and pull requests (and their comments and reviews) carrying any of
    /// these labels. Checked before `includeLabels`; same patterns.
    pub exclude_labels: Option<Vec<String>>,
    /// Deliver only events authored by one of these GitHub logins (case-insensitive): the
    /// author of the issue, pull request, comment or review. Absent or empty: anyone.
    pub include_authors: Option<Vec<String>>,
}

/// An example repository used in error messages.
const EXAMPLE_REPO: &str = "octo-org/hello-world";

impl GithubConfig {
    /// Parses a configuration document (no validation beyond the types).
    pub fn from_value(config: &Value) -> Result<Self, String> {
        GithubConfig::deserialize(config)
            .map_err(|e| format!("invalid GitHub binding configuration: {e}"))
    }

    /// `(owner, name)` of `repo`, assuming it has been validated.
    pub fn owner_and_name(&self) -> (&str, &str) {
        self.repo.split_once('/').unwrap_or((&self.repo, ""))
    }

    /// Checks everything the JSON Schema cannot say. The error says what is wrong and
    /// what to write instead.
    pub fn validate(&self) -> Result<(), String> {
        validate_repo(&self.repo)?;
        if let (Some(_), Some(_)) = (self.installation_id, &self.pat_secret) {
            return Err(
                "set either `installationId` (a GitHub App installation; the host mints the \
                 token) or `patSecret` (the name of an operator secret holding a personal \
                 access token), not both: remove one of them"
                    .to_owned(),
            );
        }
        if self.installation_id == Some(0) {
            return Err(
                "`installationId` must be a positive integer: the number at the end \
                        of https://github.com/settings/installations/<id>"
                    .to_owned(),
            );
        }
        if let Some(name) = &self.pat_secret {
            validate_secret_name(name)?;
        }
        if let Some(reviewer) = &self.reviewer {
            if let Some(login) = reviewer.strip_prefix('@') {
                return Err(format!(
                    "`reviewer` `{reviewer}` starts with `@`: write the login without it \
                     (`{login}`)"
                ));
            }
            if reviewer.is_empty() || reviewer.chars().any(|c| c.is_whitespace()) {
                return Err(format!(
                    "`reviewer` `{reviewer}` is not a GitHub login: write a user name such as \
                     `octocat` (or a team as `org/team`), or remove the field"
                ));
            }
        }
        for (field, patterns) in [
            ("excludeLabels", &self.exclude_labels),
            ("includeLabels", &self.include_labels),
        ] {
            for (i, pattern) in patterns.iter().flatten().enumerate() {
                validate_label_pattern(field, i, pattern)?;
            }
        }
        for (i, author) in self.include_authors.iter().flatten().enumerate() {
            if author.trim().is_empty() {
                return Err(format!(
                    "`includeAuthors[{i}]` is empty: write a GitHub login such as `octocat`, \
                     or remove the entry"
                ));
            }
            if let Some(login) = author.strip_prefix('@') {
                return Err(format!(
                    "`includeAuthors[{i}]` `{author}` starts with `@`: write the login \
                     without it (`{login}`)"
                ));
            }
        }
        Ok(())
    }

    /// The routing keys of a binding: `repo:<owner/name lower-cased>` and, with an
    /// installation, `installation:<id>`.
    pub fn routing_keys(&self) -> Vec<String> {
        let mut keys = vec![repo_route(&self.repo)];
        if let Some(id) = self.installation_id {
            keys.push(installation_route(id));
        }
        keys
    }
}

/// The route of repository events: `repo:<full name lower-cased>`.
pub fn repo_route(full_name: &str) -> String {
    let mut route = String::with_capacity(5 + full_name.len());
    route.push_str("repo:");
    route.extend(full_name.chars().map(|c| c.to_ascii_lowercase()));
    route
}

/// The route of installation events: `installation:<id>`.
pub fn installation_route(id: u64) -> String {
    format!("installation:{id}")
}

/// GitHub owner names: ASCII alphanumerics and hyphens, 1–39 characters.
fn is_owner(s: &str) -> bool {
    (1..=39).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// GitHub repository names: ASCII alphanumerics, `-`, `_`, `.`, 1–100 characters, not
/// `.` or `..`.
fn is_repo_name(s: &str) -> bool {
    (1..=100).contains(&s.len())
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Validates `repo` as exactly `owner/name`.
pub fn validate_repo(repo: &str) -> Result<(), String> {
    let trimmed = repo.trim();
    if trimmed.is_empty() {
        return Err(format!(
            "`repo` is empty: write the repository as `owner/name`, for example `{EXAMPLE_REPO}`"
        ));
    }
    if trimmed.len() != repo.len() {
        return Err(format!(
            "`repo` `{repo}` has surrounding whitespace: write `{trimmed}`"
        ));
    }
    // A URL or a clone address instead of `owner/name`: suggest the short form.
    let lower = repo.to_ascii_lowercase();
    for prefix in [
        "https://github.com/",
        "http://github.com/",
        "github.com/",
        "git@github.com:",
    ] {
        if lower.starts_with(prefix) {
            let rest = &repo[prefix.len()..];
            let rest = rest.strip_suffix(".git").unwrap_or(rest);
            let rest = rest.trim_end_matches('/');
            let suggestion: Vec<&str> = rest.split('/').take(2).collect();
            return Err(format!(
                "`repo` `{repo}` is a URL: write only `owner/name`, here `{}`",
                suggestion.join("/")
            ));
        }
    }
    let Some((owner, name)) = repo.split_once('/') else {
        return Err(format!(
            "`repo` `{repo}` has no `/`: write it as `owner/name`, for example `{EXAMPLE_REPO}`"
        ));
    };
    if name.contains('/') {
        return Err(format!(
            "`repo` `{repo}` has more than one `/`: write exactly `owner/name`, for example \
             `{EXAMPLE_REPO}`"
        ));
    }
    if !is_owner(owner) {
        return Err(format!(
            "the owner `{owner}` in `repo` `{repo}` is not a GitHub user or organization name: \
             it must be 1–39 letters, digits or hyphens, as in `{EXAMPLE_REPO}`"
        ));
    }
    if name == "." || name == ".." {
        return Err(format!(
            "the repository name in `repo` `{repo}` cannot be `.` or `..`: write the real \
             name, as in `{EXAMPLE_REPO}`"
        ));
    }
    if let Some(stripped) = name.strip_suffix(".git").filter(|n| is_repo_name(n)) {
        // `name.git` is a legal name, but almost always a pasted clone address.
        return Err(format!(
            "`repo` `{repo}` ends in `.git`: write the repository name without it, \
             `{owner}/{stripped}`"
        ));
    }
    if !is_repo_name(name) {
        return Err(format!(
            "the repository name `{name}` in `repo` `{repo}` is not valid: it must be 1–100 \
             letters, digits, `-`, `_` or `.`, as in `{EXAMPLE_REPO}`"
        ));
    }
    Ok(())
}

/// Validates the NAME of the operator secret holding a personal access token.
fn validate_secret_name(name: &str) -> Result<(), String> {
    const TOKEN_PREFIXES: [&str; 6] = ["ghp_", "github_pat_", "gho_", "ghu_", "ghs_", "ghr_"];
    if TOKEN_PREFIXES.iter().any(|p| name.starts_with(p)) || name.len() > 64 {
        return Err(
            "`patSecret` looks like a token itself; it must be the NAME of a secret: put the \
             token into the host configuration as `connectors.github.secrets.<name>` and write \
             that name here (for example `\"patSecret\": \"ci-bot\"`)"
                .to_owned(),
        );
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(format!(
            "`patSecret` `{name}` is not a secret name: write the name of an operator secret \
             `connectors.github.secrets.<name>` (letters, digits, `-`, `_`, `.`), for example \
             `ci-bot`"
        ));
    }
    Ok(())
}

/// Label patterns: a name, `*`, or `prefix*`.
fn validate_label_pattern(field: &str, i: usize, pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err(format!(
            "`{field}[{i}]` is empty: write a label name, `prefix*` or `*`, or remove the entry"
        ));
    }
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if body.contains('*') {
        return Err(format!(
            "`{field}[{i}]` `{pattern}` uses `*` in the middle or at the start: only a \
             trailing `*` is a wildcard (`prefix*`), or `*` alone for any label; for example \
             `{}*`",
            pattern
                .trim_matches('*')
                .split('*')
                .next()
                .unwrap_or_default()
        ));
    }
    Ok(())
}

/// Whether `label` matches `pattern` (`*`, `prefix*` or a name), ignoring case.
pub fn label_matches(pattern: &str, label: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => starts_with_ignore_case(label, prefix),
        None => eq_ignore_case(label, pattern),
    }
}

/// Case-insensitive equality (Unicode lower-casing; ASCII without allocating).
pub fn eq_ignore_case(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        a.eq_ignore_ascii_case(b)
    } else {
        a.chars()
            .flat_map(char::to_lowercase)
            .eq(b.chars().flat_map(char::to_lowercase))
    }
}

/// Case-insensitive prefix test.
fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    if s.is_ascii() && prefix.is_ascii() {
        s.len() >= prefix.len()
            && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    } else {
        let mut s = s.chars().flat_map(char::to_lowercase);
        prefix
            .chars()
            .flat_map(char::to_lowercase)
            .all(|p| s.next() == Some(p))
    }
}
