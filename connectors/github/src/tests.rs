//! Native tests over the fixtures in `fixtures/` (hand-written after GitHub's documented
//! webhook payloads).

use connector_sdk::{schema_of, Binding, Connector, Message, ToolError, Webhook};
use serde_json::{json, Value};

use crate::config::GithubConfig;
use crate::context::{build_context, Token, BINDING_FILE};
use crate::tools::{status_error, summarize_issue};
use crate::{events, Github};

const REPO: &str = "Octo-Org/Hello-World";
const ROUTE: &str = "repo:octo-org/hello-world";
const THREAD: &str = "github:octo-org/hello-world#1352";

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn hook(event: &str, body: Vec<u8>) -> Webhook {
    Webhook {
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("x-github-event".into(), event.into()),
            (
                "x-github-delivery".into(),
                "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
            ),
            (
                "x-hub-signature-256".into(),
                "sha256=0000000000000000000000000000000000000000000000000000000000000000".into(),
            ),
        ],
        body,
    }
}

/// Translates fixture `<event>[.<action>].json` and returns its only message.
fn one(file: &str) -> Message {
    let event = file.split('.').next().unwrap();
    let mut messages = Github::translate_webhook(&hook(event, fixture(file)))
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(messages.len(), 1, "{file}");
    messages.remove(0)
}

fn binding(config: Value) -> Binding {
    Binding {
        unit: "team-alpha".into(),
        config,
    }
}

fn config(config: Value) -> GithubConfig {
    GithubConfig::from_value(&config).unwrap()
}

// ---------------------------------------------------------------------------------------
// Manifest and schema

#[test]
fn manifest_is_valid() {
    let m = Github::manifest();
    assert_eq!(m.validate(), Ok(()));
    assert_eq!(m.slug(), "github");
    assert_eq!(m.effective_namespace(), "github");
    assert_eq!(m.tool_ids(), ["github.get_issue"]);
    let tool = &m.tool_list()[0];
    let hints = tool.hints();
    assert!(hints.read_only && hints.open_world && hints.idempotent && !hints.destructive);
    let schema = tool.input_schema();
    assert_eq!(schema["required"], json!(["number"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    assert_eq!(schema["properties"]["number"]["minimum"], json!(1));
}

#[test]
fn config_schema_is_camel_case_and_closed() {
    let schema = schema_of::<GithubConfig>();
    assert_eq!(schema["required"], json!(["repo"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    let props = schema["properties"].as_object().unwrap();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "excludeLabels",
            "includeAuthors",
            "includeLabels",
            "installationId",
            "patSecret",
            "repo",
            "reviewer"
        ]
    );
    assert_eq!(props["installationId"]["minimum"], json!(1));
    for p in props.values() {
        assert!(p["description"].as_str().is_some_and(|d| !d.is_empty()));
    }
    // Unknown fields are rejected by the typed config too.
    let err = GithubConfig::from_value(&json!({"repo": "a/b", "token": "x"})).unwrap_err();
    assert!(err.contains("unknown field `token`"), "{err}");
}

// ---------------------------------------------------------------------------------------
// bind

#[test]
fn bind_returns_routing_keys() {
    assert_eq!(
        Github::bind(&json!({"repo": "Octo-Org/Hello-World"})).unwrap(),
        [ROUTE]
    );
    assert_eq!(
        Github::bind(&json!({"repo": "octo-org/hello.world_2", "installationId": 48213907}))
            .unwrap(),
        ["repo:octo-org/hello.world_2", "installation:48213907"]
    );
    assert_eq!(
        Github::bind(
            &json!({"repo": "a/b", "patSecret": "ci-bot", "reviewer": "octocat",
            "includeLabels": ["bug", "area/*", "*"], "excludeLabels": [],
            "includeAuthors": ["dependabot[bot]"]})
        )
        .unwrap(),
        ["repo:a/b"]
    );
}

#[test]
fn bind_accepts_every_legal_repo_shape() {
    let long_owner = "a".repeat(39);
    let long_name = "n".repeat(100);
    for repo in [
        "a/b",
        "octo-org/hello-world",
        "Octo-Org/Hello_World.rs",
        "0/.github",
        "x/..x",
        "user-1/repo-.-_",
        &format!("{long_owner}/{long_name}"),
    ] {
        assert!(Github::bind(&json!({ "repo": repo })).is_ok(), "{repo}");
    }
}

#[test]
fn bind_rejects_bad_repos_and_says_what_to_write() {
    let cases: &[(&str, &str)] = &[
        ("", "is empty"),
        ("hello-world", "has no `/`"),
        ("a/b/c", "more than one `/`"),
        ("/b", "owner ``"),
        ("a/", "repository name ``"),
        ("octo_org/b", "owner `octo_org`"),
        ("octo org/b", "owner `octo org`"),
        (&format!("{}/b", "a".repeat(40)), "1–39"),
        (&format!("a/{}", "n".repeat(101)), "1–100"),
        ("a/.", "cannot be `.` or `..`"),
        ("a/..", "cannot be `.` or `..`"),
        ("a/b c", "repository name `b c`"),
        ("a/b~c", "repository name `b~c`"),
        ("a/ü", "repository name `ü`"),
        (" a/b", "write `a/b`"),
        (
            "https://github.com/Octo-Org/Hello-World",
            "here `Octo-Org/Hello-World`",
        ),
        ("github.com/a/b/tree/main", "here `a/b`"),
        ("git@github.com:a/b.git", "here `a/b`"),
        ("a/b.git", "`a/b`"),
    ];
    for (repo, needle) in cases {
        let err = Github::bind(&json!({ "repo": repo })).unwrap_err();
        assert!(err.contains(needle), "{repo:?}: {err}");
        assert!(err.contains('`'), "{repo:?}: {err}");
    }
}

#[test]
fn bind_rejects_conflicting_or_malformed_fields() {
    let err =
        Github::bind(&json!({"repo": "a/b", "installationId": 1, "patSecret": "ci"})).unwrap_err();
    assert!(
        err.contains("either `installationId`") && err.contains("not both"),
        "{err}"
    );

    let err = Github::bind(&json!({"repo": "a/b", "installationId": 0})).unwrap_err();
    assert!(err.contains("positive"), "{err}");

    let err = Github::bind(&json!({"repo": "a/b", "patSecret": "ghp_abcdefabcdef"})).unwrap_err();
    assert!(err.contains("looks like a token"), "{err}");
    assert!(
        !err.contains("ghp_abcdefabcdef"),
        "the error must not echo a token"
    );
    let err = Github::bind(&json!({"repo": "a/b", "patSecret": ""})).unwrap_err();
    assert!(err.contains("not a secret name"), "{err}");

    let err = Github::bind(&json!({"repo": "a/b", "reviewer": "@octocat"})).unwrap_err();
    assert!(err.contains("(`octocat`)"), "{err}");

    let err = Github::bind(&json!({"repo": "a/b", "includeLabels": ["*bug"]})).unwrap_err();
    assert!(
        err.contains("includeLabels[0]") && err.contains("`bug*`"),
        "{err}"
    );
    let err = Github::bind(&json!({"repo": "a/b", "excludeLabels": ["ok", "a*b*"]})).unwrap_err();
    assert!(err.contains("excludeLabels[1]"), "{err}");
    let err = Github::bind(&json!({"repo": "a/b", "excludeLabels": [""]})).unwrap_err();
    assert!(err.contains("is empty"), "{err}");
    let err = Github::bind(&json!({"repo": "a/b", "includeAuthors": ["@mona"]})).unwrap_err();
    assert!(err.contains("`mona`"), "{err}");

    let err = Github::bind(&json!({"repo": "a/b", "labels": ["x"]})).unwrap_err();
    assert!(err.contains("unknown field `labels`"), "{err}");
    let err = Github::bind(&json!({"installationId": 3})).unwrap_err();
    assert!(err.contains("missing field `repo`"), "{err}");
    let err = Github::bind(&json!({"repo": "a/b", "installationId": "3"})).unwrap_err();
    // The host checks the JSON Schema first; the typed config still refuses.
    assert!(err.contains("invalid type"), "{err}");
}

// ---------------------------------------------------------------------------------------
// translate_webhook, one fixture at a time

#[test]
fn issues_opened() {
    let m = one("issues.opened.json");
    assert_eq!(m.kind, "issues.opened");
    assert_eq!(m.route, ROUTE);
    assert_eq!(
        m.thread_key.as_deref(),
        Some("github:octo-org/hello-world#1347")
    );
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1347);
    assert_eq!(
        p["title"],
        "Webhook signature check fails after secret rotation"
    );
    assert_eq!(p["state"], "open");
    assert_eq!(p["author"], "monalisa");
    assert_eq!(
        p["labels"],
        json!(["bug", "area/webhooks", "priority: high"])
    );
    assert_eq!(p["assignees"], json!(["hubot"]));
    assert_eq!(
        p["url"],
        "https://github.com/Octo-Org/Hello-World/issues/1347"
    );
    assert_eq!(p["action"], "opened");
    assert_eq!(p["sender"], "monalisa");
    let body = p["body"].as_str().unwrap();
    assert!(body.starts_with("### What happened\n\nAfter rotating"));
    assert!(!body.contains('\r'), "CRLF is normalised");
    assert!(body.ends_with("cc @octocat"));
    assert!(p.get("bodyTruncated").is_none());
    assert!(p.get("label").is_none());
}

#[test]
fn issue_comment_created_on_a_pull_request() {
    let m = one("issue_comment.created.json");
    assert_eq!(m.kind, "issue_comment.created");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key.as_deref(), Some(THREAD));
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1352);
    assert_eq!(p["isPullRequest"], true);
    assert_eq!(p["author"], "monalisa");
    assert_eq!(p["labels"], json!(["enhancement", "area/runtime"]));
    assert_eq!(
        p["url"],
        "https://github.com/Octo-Org/Hello-World/pull/1352#issuecomment-2490117733"
    );
    assert!(p["body"]
        .as_str()
        .unwrap()
        .starts_with("Thanks! Two questions"));
    assert_eq!(
        p["title"],
        "github connector: typed, borrowing webhook translation"
    );
    assert_eq!(p["action"], "created");

    // The same comment on a plain issue.
    let mut raw: Value = serde_json::from_slice(&fixture("issue_comment.created.json")).unwrap();
    raw["issue"].as_object_mut().unwrap().remove("pull_request");
    let m = Github::translate_webhook(&hook("issue_comment", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.payload["isPullRequest"], false);
}

#[test]
fn pull_request_opened() {
    let raw = fixture("pull_request.opened.json");
    assert!(
        (24 * 1024..=27 * 1024).contains(&raw.len()),
        "{} bytes",
        raw.len()
    );
    let m = one("pull_request.opened.json");
    assert_eq!(m.kind, "pull_request.opened");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key.as_deref(), Some(THREAD));
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1352);
    assert_eq!(
        p["title"],
        "github connector: typed, borrowing webhook translation"
    );
    assert_eq!(p["state"], "open");
    assert_eq!(p["draft"], false);
    assert_eq!(p["merged"], false);
    assert_eq!(p["author"], "octocat");
    assert_eq!(p["labels"], json!(["enhancement", "area/runtime"]));
    assert_eq!(p["base"], "main");
    assert_eq!(p["head"], "github-connector");
    assert_eq!(
        p["url"],
        "https://github.com/Octo-Org/Hello-World/pull/1352"
    );
    assert_eq!(p["action"], "opened");
    assert_eq!(p["sender"], "octocat");
    let body = p["body"].as_str().unwrap();
    assert!(body.starts_with("## Summary\n\nThis PR moves"));
    assert!(body.ends_with("Closes #1347.\n"));
    // Compact: a small fraction of the delivery.
    let size = m.payload.to_string().len();
    assert!(size < raw.len() / 5, "payload is {size} bytes");
}

#[test]
fn pull_request_review_submitted() {
    let m = one("pull_request_review.submitted.json");
    assert_eq!(m.kind, "pull_request_review.submitted");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key.as_deref(), Some(THREAD));
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1352);
    assert_eq!(p["state"], "approved");
    assert_eq!(p["author"], "Spring-Reviewer");
    assert_eq!(
        p["body"],
        "Looks good. The translate path is a single pass now; approving.\n\nNit: the \
         `percent_decode` helper could live in the SDK one day."
    );
    assert_eq!(
        p["url"],
        "https://github.com/Octo-Org/Hello-World/pull/1352#pullrequestreview-2448812377"
    );
    assert_eq!(p["labels"], json!(["enhancement", "area/runtime"]));
}

#[test]
fn pull_request_review_comment_created() {
    let m = one("pull_request_review_comment.created.json");
    assert_eq!(m.kind, "pull_request_review_comment.created");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key.as_deref(), Some(THREAD));
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1352);
    assert_eq!(p["isPullRequest"], true);
    assert_eq!(p["author"], "Spring-Reviewer");
    assert_eq!(p["path"], "connectors/github/src/events.rs");
    assert_eq!(p["line"], 94);
    assert!(p["body"]
        .as_str()
        .unwrap()
        .starts_with("Should a form body"));
    assert_eq!(
        p["url"],
        "https://github.com/Octo-Org/Hello-World/pull/1352#discussion_r1851203344"
    );
}

#[test]
fn pull_request_review_thread_resolved() {
    let m = one("pull_request_review_thread.resolved.json");
    assert_eq!(m.kind, "pull_request_review_thread.resolved");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key.as_deref(), Some(THREAD));
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["number"], 1352);
    assert_eq!(p["resolved"], true);
    assert_eq!(p["comments"], 2);
    assert_eq!(p["author"], "Spring-Reviewer");
    assert_eq!(p["path"], "connectors/github/src/events.rs");
    assert_eq!(p["sender"], "octocat");

    let raw = String::from_utf8(fixture("pull_request_review_thread.resolved.json"))
        .unwrap()
        .replacen("\"resolved\"", "\"unresolved\"", 1);
    let m = Github::translate_webhook(&hook("pull_request_review_thread", raw.into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.kind, "pull_request_review_thread.unresolved");
    assert_eq!(m.payload["resolved"], false);
}

#[test]
fn push() {
    let m = one("push.json");
    assert_eq!(m.kind, "push");
    assert_eq!(m.route, ROUTE);
    assert_eq!(m.thread_key, None);
    let p = &m.payload;
    assert_eq!(p["repository"], REPO);
    assert_eq!(p["ref"], "refs/heads/main");
    assert_eq!(p["before"], "3f4e5d6c7b8a99887766554433221100ffeeddcc");
    assert_eq!(p["after"], "3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f");
    assert_eq!(p["pusher"], "monalisa");
    assert_eq!(p["forced"], false);
    assert_eq!(p["commitCount"], 3);
    assert_eq!(
        p["commits"],
        json!([
            {"id": "1a2b3c4", "message": "github: typed webhook payloads", "author": "octocat"},
            {"id": "2b3c4d5", "message": "github: label and author filters", "author": "octocat"},
            {"id": "3c4d5e6", "message": "Merge pull request #1352 from octocat/github-connector",
             "author": "monalisa"},
        ])
    );
    assert_eq!(
        p["compare"],
        "https://github.com/Octo-Org/Hello-World/compare/3f4e5d6c7b8a...3c4d5e6f7081"
    );
    assert!(p.get("labels").is_none() && p.get("author").is_none());
}

#[test]
fn push_lists_at_most_twenty_commits() {
    let mut raw: Value = serde_json::from_slice(&fixture("push.json")).unwrap();
    let commit = raw["commits"][0].clone();
    raw["commits"] = Value::Array(
        (0..25)
            .map(|i| {
                let mut c = commit.clone();
                c["id"] = json!(format!("{i:02}{}", "f".repeat(38)));
                c["message"] = json!(format!("commit {i}\r\n\r\nbody"));
                c["author"] = json!({"name": "No Username", "email": "n@example.com"});
                c
            })
            .collect(),
    );
    let m = Github::translate_webhook(&hook("push", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    let commits = m.payload["commits"].as_array().unwrap();
    assert_eq!(commits.len(), events::MAX_PUSH_COMMITS);
    assert_eq!(m.payload["commitCount"], 25);
    assert_eq!(
        commits[19],
        json!({"id": "19fffff", "message": "commit 19", "author": "No Username"})
    );
}

#[test]
fn installation_created() {
    let m = one("installation.created.json");
    assert_eq!(m.kind, "installation.created");
    assert_eq!(m.route, "installation:48213907");
    assert_eq!(m.thread_key, None);
    assert_eq!(
        m.payload,
        json!({
            "action": "created",
            "installationId": 48213907,
            "account": "Octo-Org",
            "repositories": ["Octo-Org/Hello-World", "Octo-Org/infra"],
            "sender": "monalisa",
        })
    );
}

#[test]
fn installation_on_an_enterprise_names_its_slug() {
    let mut raw: Value = serde_json::from_slice(&fixture("installation.created.json")).unwrap();
    raw["installation"]["account"] = json!({"id": 1, "slug": "octo-enterprise", "name": "Octo"});
    let m = Github::translate_webhook(&hook("installation", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.payload["account"], "octo-enterprise");
}

#[test]
fn installation_repositories_added() {
    let m = one("installation_repositories.added.json");
    assert_eq!(m.kind, "installation_repositories.added");
    assert_eq!(m.route, "installation:48213907");
    assert_eq!(m.thread_key, None);
    assert_eq!(
        m.payload,
        json!({
            "action": "added",
            "installationId": 48213907,
            "account": "Octo-Org",
            "repositorySelection": "selected",
            "added": ["Octo-Org/docs"],
            "removed": [],
            "sender": "monalisa",
        })
    );
}

#[test]
fn ping_and_unknown_events_deliver_nothing() {
    assert!(
        Github::translate_webhook(&hook("ping", fixture("ping.json")))
            .unwrap()
            .is_empty()
    );
    for event in ["star", "workflow_run", "check_suite", "release", "fork"] {
        // Not even parsed: any body is fine.
        assert!(
            Github::translate_webhook(&hook(event, b"not json".to_vec()))
                .unwrap()
                .is_empty(),
            "{event}"
        );
    }
}

#[test]
fn every_fixture_translates() {
    let dir = format!("{}/fixtures", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let event = stem.split('.').next().unwrap();
        let messages = Github::translate_webhook(&hook(event, fixture(&name))).unwrap();
        if event == "ping" {
            assert!(messages.is_empty());
            continue;
        }
        assert_eq!(messages.len(), 1, "{name}");
        let m = &messages[0];
        // The kind is `<event>.<action>` after the file name.
        assert_eq!(m.kind, stem, "{name}");
        assert!(m.payload.is_object(), "{name}");
        seen += 1;
    }
    assert_eq!(seen, 9);
}

#[test]
fn bad_bodies_are_errors() {
    let err = Github::translate_webhook(&hook("issues", b"<html>".to_vec())).unwrap_err();
    assert!(
        err.contains("`issues` delivery is not JSON") && err.contains("application/json"),
        "{err}"
    );
    let err = Github::translate_webhook(&hook("push", b"{\"ref\": 1}".to_vec())).unwrap_err();
    assert!(err.contains("`push`"), "{err}");
    let err = Github::translate_webhook(&hook("issues", b"{\"action\":\"opened\"}".to_vec()))
        .unwrap_err();
    assert!(
        err.contains("does not have the shape") && err.contains("missing field `issue`"),
        "{err}"
    );
    let mut no_event = hook("issues", fixture("issues.opened.json"));
    no_event.headers.retain(|(n, _)| n != "x-github-event");
    let err = Github::translate_webhook(&no_event).unwrap_err();
    assert!(err.contains("X-GitHub-Event"), "{err}");
}

#[test]
fn form_encoded_deliveries_are_decoded() {
    let json = String::from_utf8(fixture("issues.opened.json")).unwrap();
    let mut encoded = String::from("payload=");
    for b in json.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                encoded.push(b as char)
            }
            b' ' => encoded.push('+'),
            _ => encoded.push_str(&format!("%{b:02X}")),
        }
    }
    let mut h = hook("issues", encoded.into_bytes());
    h.headers[0].1 = "application/x-www-form-urlencoded".into();
    let m = Github::translate_webhook(&h).unwrap().remove(0);
    assert_eq!(m, one("issues.opened.json"));

    let mut h = hook("issues", b"other=1".to_vec());
    h.headers[0].1 = "application/x-www-form-urlencoded".into();
    let err = Github::translate_webhook(&h).unwrap_err();
    assert!(err.contains("no `payload` field"), "{err}");
}

#[test]
fn long_bodies_are_truncated_on_a_char_boundary() {
    let mut raw: Value = serde_json::from_slice(&fixture("issues.opened.json")).unwrap();
    raw["issue"]["body"] = json!("ü".repeat(events::MAX_BODY_CHARS + 10));
    let m = Github::translate_webhook(&hook("issues", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    let body = m.payload["body"].as_str().unwrap();
    assert_eq!(body.chars().count(), events::MAX_BODY_CHARS + 1);
    assert!(body.ends_with("ü…"));
    assert_eq!(m.payload["bodyTruncated"], true);

    raw["issue"]["body"] = Value::Null;
    let m = Github::translate_webhook(&hook("issues", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.payload["body"], Value::Null);
}

#[test]
fn action_specific_fields() {
    let mut raw: Value = serde_json::from_slice(&fixture("pull_request.opened.json")).unwrap();
    raw["action"] = json!("review_requested");
    raw["requested_reviewer"] = raw["pull_request"]["requested_reviewers"][0].clone();
    let m = Github::translate_webhook(&hook("pull_request", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.kind, "pull_request.review_requested");
    assert_eq!(m.payload["requestedReviewer"], "Spring-Reviewer");

    let mut raw: Value = serde_json::from_slice(&fixture("issues.opened.json")).unwrap();
    raw["action"] = json!("labeled");
    raw["label"] = raw["issue"]["labels"][2].clone();
    let m = Github::translate_webhook(&hook("issues", raw.to_string().into_bytes()))
        .unwrap()
        .remove(0);
    assert_eq!(m.kind, "issues.labeled");
    assert_eq!(m.payload["label"], "priority: high");
}

// ---------------------------------------------------------------------------------------
// accept

fn accepts(config: Value, message: &Message) -> bool {
    Github::accept(&binding(config), message)
}

/// A message like translate's, with the given labels and author.
fn labelled(labels: &[&str], author: Option<&str>) -> Message {
    let mut payload = json!({"repository": REPO, "number": 7, "labels": labels});
    if let Some(author) = author {
        payload["author"] = json!(author);
    }
    Message::new(ROUTE, "issues.opened", payload).thread_key("github:octo-org/hello-world#7")
}

#[test]
fn accept_without_filters_takes_everything_of_the_repo() {
    for file in [
        "issues.opened.json",
        "issue_comment.created.json",
        "pull_request.opened.json",
        "pull_request_review.submitted.json",
        "pull_request_review_comment.created.json",
        "pull_request_review_thread.resolved.json",
        "push.json",
    ] {
        let m = one(file);
        assert!(
            accepts(json!({"repo": "octo-org/HELLO-world"}), &m),
            "{file}"
        );
        assert!(!accepts(json!({"repo": "octo-org/other"}), &m), "{file}");
    }
}

#[test]
fn accept_checks_the_installation_of_installation_events() {
    for file in [
        "installation.created.json",
        "installation_repositories.added.json",
    ] {
        let m = one(file);
        assert!(
            accepts(json!({"repo": "a/b", "installationId": 48213907}), &m),
            "{file}"
        );
        assert!(
            !accepts(json!({"repo": "a/b", "installationId": 1}), &m),
            "{file}"
        );
        assert!(!accepts(json!({"repo": "a/b"}), &m), "{file}");
        // Label and author filters: no labels or author on these events.
        assert!(!accepts(
            json!({"repo": "a/b", "installationId": 48213907, "includeLabels": ["*"]}),
            &m
        ));
        assert!(!accepts(
            json!({"repo": "a/b", "installationId": 48213907, "includeAuthors": ["monalisa"]}),
            &m
        ));
        assert!(accepts(
            json!({"repo": "a/b", "installationId": 48213907, "includeLabels": [],
                   "includeAuthors": [], "excludeLabels": ["*"]}),
            &m
        ));
    }
}

#[test]
fn exclude_labels_drop_matches() {
    let m = labelled(&["bug", "Area/Webhooks"], Some("mona"));
    assert!(!accepts(
        json!({"repo": REPO, "excludeLabels": ["BUG"]}),
        &m
    ));
    assert!(!accepts(
        json!({"repo": REPO, "excludeLabels": ["area/*"]}),
        &m
    ));
    assert!(!accepts(json!({"repo": REPO, "excludeLabels": ["*"]}), &m));
    assert!(accepts(
        json!({"repo": REPO, "excludeLabels": ["wontfix", "area/runtime", "bugs*"]}),
        &m
    ));
    // `*` needs a label to match.
    assert!(accepts(
        json!({"repo": REPO, "excludeLabels": ["*"]}),
        &labelled(&[], None)
    ));
}

#[test]
fn include_labels_keep_only_matches() {
    let m = labelled(&["enhancement", "area/runtime"], Some("mona"));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["Enhancement"]}),
        &m
    ));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["docs", "AREA/*"]}),
        &m
    ));
    assert!(accepts(json!({"repo": REPO, "includeLabels": ["*"]}), &m));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["area/run*"]}),
        &m
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeLabels": ["bug", "area/web*"]}),
        &m
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeLabels": ["enhance"]}),
        &m
    ));
    // Empty list: no requirement. Unlabelled items never match a non-empty list.
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": []}),
        &labelled(&[], None)
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeLabels": ["*"]}),
        &labelled(&[], None)
    ));
}

#[test]
fn exclude_wins_over_include() {
    let m = labelled(&["bug", "security"], Some("mona"));
    let config = json!({"repo": REPO, "includeLabels": ["bug"], "excludeLabels": ["secur*"]});
    assert!(!accepts(config, &m));
    let config = json!({"repo": REPO, "includeLabels": ["bug"], "excludeLabels": ["wontfix"]});
    assert!(accepts(config, &m));
}

#[test]
fn include_authors_are_case_insensitive_and_checked_last() {
    let m = labelled(&["bug"], Some("Dependabot[bot]"));
    assert!(accepts(
        json!({"repo": REPO, "includeAuthors": ["dependabot[bot]"]}),
        &m
    ));
    assert!(accepts(
        json!({"repo": REPO, "includeAuthors": ["x", "DEPENDABOT[BOT]"]}),
        &m
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["dependabot"]}),
        &m
    ));
    assert!(accepts(json!({"repo": REPO, "includeAuthors": []}), &m));
    // Label filters first: a matching author does not rescue an excluded label.
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["dependabot[bot]"], "excludeLabels": ["bug"]}),
        &m
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["dependabot[bot]"], "includeLabels": ["docs"]}),
        &m
    ));
    // No author: only passes without an author list.
    let anonymous = labelled(&["bug"], None);
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["mona"]}),
        &anonymous
    ));
    // Unicode case folding.
    let m = labelled(&["Überarbeitung"], Some("mona"));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["über*"]}),
        &m
    ));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["ÜBERARBEITUNG"]}),
        &m
    ));
}

#[test]
fn filters_apply_to_fixture_messages() {
    let issue = one("issues.opened.json");
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["priority:*"]}),
        &issue
    ));
    assert!(!accepts(
        json!({"repo": REPO, "excludeLabels": ["priority: HIGH"]}),
        &issue
    ));
    assert!(accepts(
        json!({"repo": REPO, "includeAuthors": ["MonaLisa"]}),
        &issue
    ));

    // Comments and reviews carry the labels of their issue or pull request, and their own
    // author.
    let comment = one("issue_comment.created.json");
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": ["area/*"]}),
        &comment
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["octocat"]}),
        &comment
    ));
    let review = one("pull_request_review.submitted.json");
    assert!(accepts(
        json!({"repo": REPO, "includeAuthors": ["spring-reviewer"]}),
        &review
    ));
    assert!(!accepts(
        json!({"repo": REPO, "excludeLabels": ["enhancement"]}),
        &review
    ));

    // Push: no labels, no author.
    let push = one("push.json");
    assert!(accepts(
        json!({"repo": REPO, "excludeLabels": ["*"]}),
        &push
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeLabels": ["*"]}),
        &push
    ));
    assert!(!accepts(
        json!({"repo": REPO, "includeAuthors": ["monalisa"]}),
        &push
    ));
    assert!(accepts(
        json!({"repo": REPO, "includeLabels": [], "includeAuthors": []}),
        &push
    ));
}

#[test]
fn accept_refuses_foreign_or_broken_messages() {
    let m = labelled(&[], None);
    assert!(!accepts(json!({"repo": "octo-org/hello-world-2"}), &m));
    assert!(!accepts(json!({"not": "a config"}), &m));
    let no_repo = Message::new(ROUTE, "issues.opened", json!({"number": 1}));
    assert!(!accepts(json!({"repo": REPO}), &no_repo));
}

// ---------------------------------------------------------------------------------------
// runtime_context

fn env_of(ctx: &connector_sdk::AgentContext) -> Vec<(&str, &str)> {
    ctx.env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[test]
fn runtime_context_without_a_token_source() {
    let b = binding(json!({"repo": "Octo-Org/Hello-World", "reviewer": "Spring-Reviewer"}));
    let ctx = Github::runtime_context(&b).unwrap();
    assert_eq!(
        env_of(&ctx),
        [
            ("SPRING_CONNECTOR_GITHUB_OWNER", "Octo-Org"),
            ("SPRING_CONNECTOR_GITHUB_REPO", "Hello-World"),
            ("SPRING_CONNECTOR_GITHUB_REVIEWER", "Spring-Reviewer"),
        ]
    );
    assert_eq!(ctx.files.len(), 1);
    let (path, content) = &ctx.files[0];
    assert_eq!(path, BINDING_FILE);
    assert!(content.ends_with('\n'));
    let file: Value = serde_json::from_str(content).unwrap();
    assert_eq!(
        file,
        json!({
            "owner": "Octo-Org",
            "repo": "Hello-World",
            "installationId": null,
            "reviewer": "Spring-Reviewer",
            "ownerUnitId": "team-alpha",
            "tokenExpiresAt": null,
        })
    );
    // Field order as documented.
    let keys: Vec<&str> = [
        "owner",
        "repo",
        "installationId",
        "reviewer",
        "ownerUnitId",
        "tokenExpiresAt",
    ]
    .to_vec();
    let positions: Vec<usize> = keys
        .iter()
        .map(|k| content.find(&format!("\"{k}\"")).unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{content}");

    let ctx = Github::runtime_context(&binding(json!({"repo": "a/b"}))).unwrap();
    assert_eq!(
        env_of(&ctx),
        [
            ("SPRING_CONNECTOR_GITHUB_OWNER", "a"),
            ("SPRING_CONNECTOR_GITHUB_REPO", "b")
        ]
    );
}

#[test]
fn runtime_context_token_errors_are_errors() {
    // No such operator secret (natively, no secret exists).
    let err = Github::runtime_context(&binding(json!({"repo": "a/b", "patSecret": "ci-bot"})))
        .unwrap_err();
    assert_eq!(
        err,
        "the secret `ci-bot` named by patSecret is not configured on this host \
         (connectors.github.secrets.ci-bot)"
    );
    // Installation tokens exist only inside the host; natively the SDK's error passes
    // through unchanged.
    let err =
        Github::runtime_context(&binding(json!({"repo": "a/b", "installationId": 7}))).unwrap_err();
    assert_eq!(
        err,
        connector_sdk::github::installation_token(7).unwrap_err()
    );
    // Invalid configuration.
    assert!(Github::runtime_context(&binding(json!({"repo": "nope"}))).is_err());
}

#[test]
fn runtime_context_with_tokens_never_writes_the_token_to_the_file() {
    let secret = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";
    let installation = config(json!({"repo": "Octo-Org/Hello-World", "installationId": 48213907}));
    let ctx = build_context(
        "team-alpha",
        &installation,
        Some(Token {
            value: secret.into(),
            expires_at: Some("2025-11-19T11:00:00Z".into()),
        }),
    );
    assert_eq!(
        env_of(&ctx),
        [
            ("SPRING_CONNECTOR_GITHUB_OWNER", "Octo-Org"),
            ("SPRING_CONNECTOR_GITHUB_REPO", "Hello-World"),
            ("SPRING_CONNECTOR_GITHUB_TOKEN", secret),
            ("GITHUB_TOKEN", secret),
            ("SPRING_CONNECTOR_GITHUB_INSTALLATION_ID", "48213907"),
            (
                "SPRING_CONNECTOR_GITHUB_TOKEN_EXPIRES_AT",
                "2025-11-19T11:00:00Z"
            ),
        ]
    );
    let file: Value = serde_json::from_str(&ctx.files[0].1).unwrap();
    assert_eq!(file["installationId"], 48213907);
    assert_eq!(file["tokenExpiresAt"], "2025-11-19T11:00:00Z");
    assert_eq!(file["reviewer"], Value::Null);
    assert!(!ctx.files[0].1.contains(secret));

    let pat = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz";
    let ctx = build_context(
        "u",
        &config(json!({"repo": "a/b", "patSecret": "ci-bot"})),
        Some(Token {
            value: pat.into(),
            expires_at: None,
        }),
    );
    assert_eq!(
        env_of(&ctx),
        [
            ("SPRING_CONNECTOR_GITHUB_OWNER", "a"),
            ("SPRING_CONNECTOR_GITHUB_REPO", "b"),
            ("SPRING_CONNECTOR_GITHUB_TOKEN", pat),
            ("GITHUB_TOKEN", pat),
        ]
    );
    assert!(!ctx.files[0].1.contains(pat));
    assert!(!ctx.files[0].1.contains("ci-bot"));
    // Tokens never show in Debug output either.
    let debug = format!(
        "{:?}",
        Token {
            value: pat.into(),
            expires_at: None
        }
    );
    assert!(!debug.contains(pat));
}

#[test]
fn every_env_name_is_allowed() {
    let ctx = build_context(
        "u",
        &config(json!({"repo": "a/b", "installationId": 1, "reviewer": "r"})),
        Some(Token {
            value: "t".into(),
            expires_at: Some("2025-01-01T00:00:00Z".into()),
        }),
    );
    assert_eq!(ctx.env.len(), 7);
    for (name, _) in &ctx.env {
        assert!(
            name.starts_with("SPRING_CONNECTOR_GITHUB_") || name == "GITHUB_TOKEN",
            "{name}"
        );
    }
    for (path, _) in &ctx.files {
        assert!(path.starts_with(".spring/connectors/github/"), "{path}");
    }
}

// ---------------------------------------------------------------------------------------
// github.get_issue

#[test]
fn get_issue_summarises_github_issue_json() {
    let api = json!({
        "url": "https://api.github.com/repos/Octo-Org/Hello-World/issues/1347",
        "html_url": "https://github.com/Octo-Org/Hello-World/issues/1347",
        "id": 1, "node_id": "I_x", "number": 1347, "title": "Signature check fails",
        "user": {"login": "monalisa", "id": 2154},
        "labels": [{"id": 1, "name": "bug", "color": "d73a4a"}],
        "state": "closed", "state_reason": "completed", "locked": false,
        "assignees": [{"login": "hubot"}], "comments": 4,
        "created_at": "2025-11-19T10:14:02Z", "updated_at": "2025-11-20T08:00:00Z",
        "closed_at": "2025-11-20T08:00:00Z", "body": "line one\r\nline two",
        "reactions": {"total_count": 0}
    });
    let summary = summarize_issue(REPO, api.to_string().as_bytes()).unwrap();
    assert_eq!(
        serde_json::to_value(&summary).unwrap(),
        json!({
            "repository": REPO, "number": 1347, "title": "Signature check fails",
            "state": "closed", "stateReason": "completed", "author": "monalisa",
            "labels": ["bug"], "assignees": ["hubot"], "comments": 4,
            "isPullRequest": false, "body": "line one\nline two",
            "url": "https://github.com/Octo-Org/Hello-World/issues/1347",
            "createdAt": "2025-11-19T10:14:02Z", "updatedAt": "2025-11-20T08:00:00Z",
            "closedAt": "2025-11-20T08:00:00Z",
        })
    );
    assert!(summarize_issue(REPO, b"[]").is_err());
}

#[test]
fn github_errors_map_to_tool_errors() {
    let response = |status: u16, body: &str| connector_sdk::http::Response {
        status,
        headers: vec![],
        body: body.as_bytes().to_vec(),
    };
    let doc = r#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}"#;
    assert_eq!(
        status_error(&response(401, doc)),
        ToolError::Unauthorized("GitHub answered 401: Bad credentials".into())
    );
    assert!(matches!(
        status_error(&response(403, r#"{"message":"Resource not accessible by integration"}"#)),
        ToolError::Unauthorized(m) if m.contains("Resource not accessible by integration")
    ));
    assert_eq!(
        status_error(&response(404, r#"{"message":"Not Found"}"#)),
        ToolError::Failed("GitHub answered 404: Not Found".into())
    );
    assert!(matches!(
        status_error(&response(502, "<html>bad gateway</html>")),
        ToolError::Failed(m) if m.contains("bad gateway")
    ));
}

#[test]
fn get_issue_natively_has_no_network() {
    let ctx = connector_sdk::CallContext {
        binding: binding(json!({"repo": "a/b"})),
        agent: Some("agent-1".into()),
        call_id: "c1".into(),
    };
    let m = Github::manifest();
    let tool = m.find_tool("github.get_issue").unwrap();
    assert_eq!(tool.name(), "get_issue");
    let err = crate::tools::get_issue(&ctx, crate::tools::GetIssueArgs { number: 1 }).unwrap_err();
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("only available inside a component")),
        "{err:?}"
    );
    let err = crate::tools::get_issue(&ctx, crate::tools::GetIssueArgs { number: 0 }).unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)));
    // A PAT binding whose secret is missing fails before any request.
    let ctx = connector_sdk::CallContext {
        binding: binding(json!({"repo": "a/b", "patSecret": "ci-bot"})),
        ..ctx
    };
    let err = crate::tools::get_issue(&ctx, crate::tools::GetIssueArgs { number: 1 }).unwrap_err();
    assert!(
        matches!(&err, ToolError::Failed(m) if m.contains("`ci-bot`")),
        "{err:?}"
    );
}
