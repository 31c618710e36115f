//! Fake HTTP APIs that declarative connectors call in the tests, served on 127.0.0.1:
//!
//! - [`FakeGithubRest`]: the part of GitHub's REST API the example manifests use
//!   (repository contents, pull requests), with GitHub's status codes and messages, and
//!   its authentication (a `User-Agent` and a bearer token the test says is valid).
//! - [`FakeNotes`]: the Notes API of `tests/fixtures/declarative/notes-openapi.yaml`.
//! - [`FakeStatus`]: a two-route status service (`GET /status`, `POST /restart`).
//!
//! Every fake records each request it got ([`Recorded`]) before it answers, answered or
//! refused, so a test sees exactly what went over the wire.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde_json::{json, Map, Value};

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The path as sent (still percent-encoded).
    pub path: String,
    /// The query string as sent, if any.
    pub query: Option<String>,
    /// Header names lower-cased; repeated headers joined with `, `.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The decoded query parameters, in order.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        self.query
            .as_deref()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (
                    percent_decode(&k.replace('+', " ")).unwrap_or_default(),
                    percent_decode(&v.replace('+', " ")).unwrap_or_default(),
                )
            })
            .collect()
    }
}

async fn record(request: Request) -> (Recorded, Bytes) {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let mut headers = BTreeMap::new();
    for (name, value) in &parts.headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_string())
            .and_modify(|v: &mut String| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    (
        Recorded {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers,
            body: body.to_vec(),
        },
        body,
    )
}

async fn serve(router: Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}"), server)
}

/// `%XX`-decoding of one URL component; `None` when it is malformed or not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(B64[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 (padding required, whitespace between groups allowed, as GitHub
/// accepts); `None` when it is not valid.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let clean: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !clean.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::new();
    for (q, quad) in clean.chunks(4).enumerate() {
        let last = q == clean.len() / 4 - 1;
        let mut n = 0u32;
        let mut pad = 0;
        for (i, &c) in quad.iter().enumerate() {
            let v = if c == b'=' {
                if !last || i < 2 {
                    return None;
                }
                pad += 1;
                0
            } else {
                if pad > 0 {
                    return None;
                }
                B64.iter().position(|&x| x == c)? as u32
            };
            n = (n << 6) | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------
// GitHub REST
// ---------------------------------------------------------------------------------------

/// Decides whether a bearer token is valid (a PAT, or a token the App fake minted).
pub type TokenCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Default)]
struct Repo {
    branches: Vec<String>,
    /// (branch, path) → (content, sha).
    files: HashMap<(String, String), (Vec<u8>, String)>,
    pulls: Vec<Value>,
}

struct GithubState {
    token_ok: TokenCheck,
    repos: Mutex<HashMap<(String, String), Repo>>,
    requests: Mutex<Vec<Recorded>>,
    echo_authorization: Mutex<bool>,
    next: Mutex<u64>,
}

/// A fake GitHub REST API: `GET`/`PUT /repos/{owner}/{repo}/contents/{path}` and
/// `GET`/`POST /repos/{owner}/{repo}/pulls`. Stops when dropped.
pub struct FakeGithubRest {
    url: String,
    state: Arc<GithubState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGithubRest {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn gh_error(status: StatusCode, message: &str, docs: &str) -> Value {
    json!({
        "message": message,
        "documentation_url": format!("https://docs.github.com/rest/{docs}"),
        "status": status.as_u16().to_string(),
    })
}

impl FakeGithubRest {
    /// Starts the fake; `token_ok` decides which bearer tokens authenticate.
    pub async fn start(token_ok: TokenCheck) -> FakeGithubRest {
        let state = Arc::new(GithubState {
            token_ok,
            repos: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            echo_authorization: Mutex::new(false),
            next: Mutex::new(1),
        });
        let router = Router::new()
            .fallback(github_handle)
            .with_state(state.clone());
        let (url, server) = serve(router).await;
        FakeGithubRest { url, state, server }
    }

    /// The API base URL.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Creates repository `owner/repo` with branches `main` and `dev`.
    pub fn add_repo(&self, owner: &str, repo: &str) {
        self.state.repos.lock().unwrap().insert(
            (owner.to_string(), repo.to_string()),
            Repo {
                branches: vec!["main".into(), "dev".into()],
                ..Repo::default()
            },
        );
    }

    /// Puts a file on a branch.
    pub fn put_file(&self, owner: &str, repo: &str, branch: &str, path: &str, content: &[u8]) {
        let sha = self.next_sha();
        let mut repos = self.state.repos.lock().unwrap();
        let r = repos
            .get_mut(&(owner.to_string(), repo.to_string()))
            .expect("add_repo first");
        r.files.insert(
            (branch.to_string(), path.to_string()),
            (content.to_vec(), sha),
        );
    }

    /// A file's content on a branch.
    pub fn file(&self, owner: &str, repo: &str, branch: &str, path: &str) -> Option<Vec<u8>> {
        let repos = self.state.repos.lock().unwrap();
        repos
            .get(&(owner.to_string(), repo.to_string()))?
            .files
            .get(&(branch.to_string(), path.to_string()))
            .map(|(c, _)| c.clone())
    }

    /// Opens a pull request (as someone else would).
    pub fn add_pull(&self, owner: &str, repo: &str, title: &str, head: &str) {
        let number = self.next_number();
        let mut repos = self.state.repos.lock().unwrap();
        let r = repos
            .get_mut(&(owner.to_string(), repo.to_string()))
            .expect("add_repo first");
        r.pulls.push(pull(
            owner, repo, number, title, "", head, "main", "octocat",
        ));
    }

    /// When on, every JSON answer (errors included) carries the `Authorization` header
    /// the request came with, under `"request_authorization"`: a careless API.
    pub fn echo_authorization(&self, on: bool) {
        *self.state.echo_authorization.lock().unwrap() = on;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    fn next_sha(&self) -> String {
        next_sha(&self.state)
    }

    fn next_number(&self) -> u64 {
        let mut n = self.state.next.lock().unwrap();
        *n += 1;
        *n
    }
}

fn next_sha(state: &GithubState) -> String {
    let mut n = state.next.lock().unwrap();
    *n += 1;
    format!("{:040x}", 0x5ca1ab1e_u64 * 1_000_003 + *n)
}

#[allow(clippy::too_many_arguments)]
fn pull(
    owner: &str,
    repo: &str,
    number: u64,
    title: &str,
    body: &str,
    head: &str,
    base: &str,
    user: &str,
) -> Value {
    json!({
        "url": format!("https://api.github.com/repos/{owner}/{repo}/pulls/{number}"),
        "html_url": format!("https://github.com/{owner}/{repo}/pull/{number}"),
        "number": number,
        "state": "open",
        "title": title,
        "body": body,
        "user": {"login": user},
        "head": {"ref": head, "repo": {"full_name": format!("{owner}/{repo}")}},
        "base": {"ref": base, "repo": {"full_name": format!("{owner}/{repo}")}},
    })
}

async fn github_handle(State(state): State<Arc<GithubState>>, request: Request) -> Response {
    let (recorded, body) = record(request).await;
    state.requests.lock().unwrap().push(recorded.clone());
    let echo = *state.echo_authorization.lock().unwrap();
    let (status, answer) = github_answer(&state, &recorded, &body);
    match answer {
        GhAnswer::Json(mut value) => {
            if echo {
                let seen = recorded.header("authorization").unwrap_or("").to_string();
                match &mut value {
                    Value::Object(map) => {
                        map.insert("request_authorization".into(), seen.into());
                    }
                    Value::Array(items) => {
                        items.push(json!({"request_authorization": seen}));
                    }
                    _ => {}
                }
            }
            let mut response = (status, Json(value)).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            response
        }
        GhAnswer::Raw(bytes) => {
            let mut response = (status, bytes).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
    }
}

enum GhAnswer {
    Json(Value),
    Raw(Vec<u8>),
}

fn github_answer(state: &GithubState, r: &Recorded, body: &[u8]) -> (StatusCode, GhAnswer) {
    let err = |status: StatusCode, message: &str, docs: &str| {
        (status, GhAnswer::Json(gh_error(status, message, docs)))
    };
    if r.header("user-agent").unwrap_or("").is_empty() {
        return err(
            StatusCode::FORBIDDEN,
            "Request forbidden by administrative rules. Please make sure your request has a User-Agent header",
            "overview/resources-in-the-rest-api#user-agent-required",
        );
    }
    let token = r.header("authorization").and_then(|v| {
        v.strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("token "))
    });
    if !token.is_some_and(|t| (state.token_ok)(t)) {
        return err(
            StatusCode::UNAUTHORIZED,
            "Bad credentials",
            "overview/troubleshooting-the-rest-api",
        );
    }
    // /repos/{owner}/{repo}/contents/{path...} or /repos/{owner}/{repo}/pulls
    let segments: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
    let decoded: Option<Vec<String>> = segments.iter().map(|s| percent_decode(s)).collect();
    let Some(decoded) = decoded else {
        return err(StatusCode::BAD_REQUEST, "Bad Request", "");
    };
    if decoded.len() < 4 || decoded[0] != "repos" {
        return err(StatusCode::NOT_FOUND, "Not Found", "");
    }
    let key = (decoded[1].clone(), decoded[2].clone());
    let mut repos = state.repos.lock().unwrap();
    let Some(repo) = repos.get_mut(&key) else {
        return err(
            StatusCode::NOT_FOUND,
            "Not Found",
            "repos/repos#get-a-repository",
        );
    };
    let (owner, name) = key;
    match (r.method.as_str(), decoded[3].as_str()) {
        ("GET" | "PUT", "contents") if decoded.len() > 4 => {
            if decoded[4..]
                .iter()
                .any(|s| s.is_empty() || s == "." || s == "..")
            {
                return err(StatusCode::NOT_FOUND, "Not Found", "repos/contents");
            }
            let path = decoded[4..].join("/");
            if r.method == "GET" {
                let branch = r
                    .query_pairs()
                    .into_iter()
                    .find(|(k, _)| k == "ref")
                    .map(|(_, v)| v)
                    .unwrap_or_else(|| "main".into());
                let Some((content, sha)) = repo.files.get(&(branch, path.clone())) else {
                    return err(
                        StatusCode::NOT_FOUND,
                        "Not Found",
                        "repos/contents#get-repository-content",
                    );
                };
                let accept = r.header("accept").unwrap_or("");
                if accept.contains("application/vnd.github.v3.raw")
                    || accept.contains("application/vnd.github.raw")
                {
                    return (StatusCode::OK, GhAnswer::Raw(content.clone()));
                }
                let file_name = path.rsplit('/').next().unwrap_or("").to_string();
                return (
                    StatusCode::OK,
                    GhAnswer::Json(json!({
                        "type": "file",
                        "encoding": "base64",
                        "size": content.len(),
                        "name": file_name,
                        "path": path,
                        "sha": sha,
                        "content": base64_encode(content),
                    })),
                );
            }
            put_contents(state, repo, &owner, &name, &path, body)
        }
        ("GET", "pulls") if decoded.len() == 4 => (
            StatusCode::OK,
            GhAnswer::Json(Value::Array(repo.pulls.clone())),
        ),
        ("POST", "pulls") if decoded.len() == 4 => {
            let Ok(Value::Object(input)) = serde_json::from_slice::<Value>(body) else {
                return err(
                    StatusCode::BAD_REQUEST,
                    "Problems parsing JSON",
                    "pulls/pulls#create-a-pull-request",
                );
            };
            let text = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_string);
            let mut errors = Vec::new();
            for field in ["title", "head", "base"] {
                match text(field) {
                    None => errors.push(
                        json!({"resource": "PullRequest", "field": field, "code": "missing_field"}),
                    ),
                    Some(b) if field != "title" && !repo.branches.contains(&b) => errors.push(
                        json!({"resource": "PullRequest", "field": field, "code": "invalid"}),
                    ),
                    Some(_) => {}
                }
            }
            if !errors.is_empty() {
                let mut e = gh_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Validation Failed",
                    "pulls/pulls#create-a-pull-request",
                );
                e["errors"] = Value::Array(errors);
                return (StatusCode::UNPROCESSABLE_ENTITY, GhAnswer::Json(e));
            }
            let number = {
                let mut n = state.next.lock().unwrap();
                *n += 1;
                *n
            };
            let created = pull(
                &owner,
                &name,
                number,
                &text("title").unwrap_or_default(),
                &text("body").unwrap_or_default(),
                &text("head").unwrap_or_default(),
                &text("base").unwrap_or_default(),
                "my-app[bot]",
            );
            repo.pulls.push(created.clone());
            (StatusCode::CREATED, GhAnswer::Json(created))
        }
        _ => err(StatusCode::NOT_FOUND, "Not Found", ""),
    }
}

fn put_contents(
    state: &GithubState,
    repo: &mut Repo,
    owner: &str,
    name: &str,
    path: &str,
    body: &[u8],
) -> (StatusCode, GhAnswer) {
    const DOCS: &str = "repos/contents#create-or-update-file-contents";
    let invalid = |message: &str| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            GhAnswer::Json(gh_error(StatusCode::UNPROCESSABLE_ENTITY, message, DOCS)),
        )
    };
    let Ok(Value::Object(input)) = serde_json::from_slice::<Value>(body) else {
        return (
            StatusCode::BAD_REQUEST,
            GhAnswer::Json(gh_error(
                StatusCode::BAD_REQUEST,
                "Problems parsing JSON",
                DOCS,
            )),
        );
    };
    let Some(message) = input.get("message").and_then(Value::as_str) else {
        return invalid("Invalid request.\n\n\"message\" wasn't supplied.");
    };
    let Some(content) = input.get("content").and_then(Value::as_str) else {
        return invalid("Invalid request.\n\n\"content\" wasn't supplied.");
    };
    let Some(bytes) = base64_decode(content) else {
        return invalid("content is not valid Base64");
    };
    let branch = match input.get("branch") {
        None => "main".to_string(),
        Some(Value::String(b)) => b.clone(),
        Some(_) => {
            return invalid("Invalid request.\n\nFor 'properties/branch', it is not a string.")
        }
    };
    if !repo.branches.contains(&branch) {
        return (
            StatusCode::NOT_FOUND,
            GhAnswer::Json(gh_error(
                StatusCode::NOT_FOUND,
                &format!("Branch {branch} not found"),
                DOCS,
            )),
        );
    }
    let existing = repo
        .files
        .get(&(branch.clone(), path.to_string()))
        .map(|(_, sha)| sha.clone());
    if let Some(sha) = &existing {
        match input.get("sha").and_then(Value::as_str) {
            None => return invalid("Invalid request.\n\n\"sha\" wasn't supplied."),
            Some(given) if given != sha => {
                return (
                    StatusCode::CONFLICT,
                    GhAnswer::Json(gh_error(
                        StatusCode::CONFLICT,
                        &format!("{path} does not match {given}"),
                        DOCS,
                    )),
                )
            }
            Some(_) => {}
        }
    }
    let sha = next_sha(state);
    let commit = next_sha(state);
    let size = bytes.len();
    repo.files
        .insert((branch, path.to_string()), (bytes, sha.clone()));
    let file_name = path.rsplit('/').next().unwrap_or("").to_string();
    (
        if existing.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        },
        GhAnswer::Json(json!({
            "content": {
                "type": "file",
                "name": file_name,
                "path": path,
                "sha": sha,
                "size": size,
                "html_url": format!("https://github.com/{owner}/{name}/blob/main/{path}"),
            },
            "commit": {"sha": commit, "message": message},
        })),
    )
}

// ---------------------------------------------------------------------------------------
// Notes (tests/fixtures/declarative/notes-openapi.yaml)
// ---------------------------------------------------------------------------------------

struct NotesState {
    token: String,
    notes: Mutex<Vec<Value>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The Notes API of `notes-openapi.yaml`, under `/v1`, with bearer authentication and
/// the document's validation (unknown query parameters and body members refused).
/// Stops when dropped.
pub struct FakeNotes {
    url: String,
    state: Arc<NotesState>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeNotes {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeNotes {
    /// Starts the API; requests must carry `Authorization: Bearer {token}`.
    pub async fn start(token: &str) -> FakeNotes {
        let state = Arc::new(NotesState {
            token: token.to_string(),
            notes: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        });
        let router = Router::new()
            .fallback(notes_handle)
            .with_state(state.clone());
        let (url, server) = serve(router).await;
        FakeNotes { url, state, server }
    }

    /// The base URL (`…/v1`), the document's server.
    pub fn url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// Adds a note; returns its id.
    pub fn add(&self, title: &str, text: &str, tags: &[&str]) -> u64 {
        let mut notes = self.state.notes.lock().unwrap();
        let id = notes.len() as u64 + 1;
        notes.push(json!({"id": id, "title": title, "text": text, "tags": tags}));
        id
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

fn problem(status: StatusCode, detail: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        json!({"title": status.canonical_reason().unwrap_or(""), "status": status.as_u16(), "detail": detail}).to_string(),
    )
        .into_response()
}

async fn notes_handle(State(state): State<Arc<NotesState>>, request: Request) -> Response {
    let (r, body) = record(request).await;
    state.requests.lock().unwrap().push(r.clone());
    if r.header("authorization") != Some(&format!("Bearer {}", state.token)) {
        return problem(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
    }
    let Some(rest) = r.path.strip_prefix("/v1/notes") else {
        return problem(StatusCode::NOT_FOUND, "no such route");
    };
    let method = r.method.parse::<Method>().unwrap_or(Method::OPTIONS);
    match (method, rest) {
        (Method::GET, "") => {
            let mut tag = None;
            let mut limit = 100usize;
            for (k, v) in r.query_pairs() {
                match k.as_str() {
                    "tag" => tag = Some(v),
                    "limit" => match v.parse::<usize>() {
                        Ok(n) if (1..=100).contains(&n) => limit = n,
                        _ => {
                            return problem(
                                StatusCode::BAD_REQUEST,
                                &format!("limit must be an integer from 1 to 100, not {v:?}"),
                            )
                        }
                    },
                    other => {
                        return problem(
                            StatusCode::BAD_REQUEST,
                            &format!("unknown query parameter {other:?}"),
                        )
                    }
                }
            }
            let notes = state.notes.lock().unwrap();
            let found: Vec<Value> = notes
                .iter()
                .rev()
                .filter(|n| {
                    tag.as_ref().is_none_or(|t| {
                        n["tags"]
                            .as_array()
                            .is_some_and(|a| a.iter().any(|x| x == t.as_str()))
                    })
                })
                .take(limit)
                .cloned()
                .collect();
            Json(Value::Array(found)).into_response()
        }
        (Method::POST, "") => {
            if r.query.is_some() {
                return problem(StatusCode::BAD_REQUEST, "createNote takes no query");
            }
            if !r
                .header("content-type")
                .is_some_and(|c| c.starts_with("application/json"))
            {
                return problem(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "the body must be application/json",
                );
            }
            let input: Map<String, Value> = match serde_json::from_slice(&body) {
                Ok(Value::Object(m)) => m,
                _ => return problem(StatusCode::BAD_REQUEST, "the body must be a JSON object"),
            };
            if let Err(why) = check_new_note(&input) {
                return problem(StatusCode::UNPROCESSABLE_ENTITY, &why);
            }
            let mut notes = state.notes.lock().unwrap();
            let mut note = input;
            note.insert("id".into(), json!(notes.len() as u64 + 1));
            let note = Value::Object(note);
            notes.push(note.clone());
            (StatusCode::CREATED, Json(note)).into_response()
        }
        (Method::GET, id) => {
            let Some(id) = id
                .strip_prefix('/')
                .and_then(percent_decode)
                .and_then(|s| s.parse::<u64>().ok())
            else {
                return problem(StatusCode::BAD_REQUEST, "noteId must be an integer");
            };
            if r.query.is_some() {
                return problem(StatusCode::BAD_REQUEST, "getNote takes no query");
            }
            let notes = state.notes.lock().unwrap();
            match notes.iter().find(|n| n["id"] == id) {
                Some(n) => Json(n.clone()).into_response(),
                None => problem(StatusCode::NOT_FOUND, &format!("no note {id}")),
            }
        }
        _ => problem(StatusCode::METHOD_NOT_ALLOWED, "no such operation"),
    }
}

/// `NewNote`: `title` (string, required), `text` (string), `tags` (strings of `[a-z]+`).
fn check_new_note(note: &Map<String, Value>) -> Result<(), String> {
    for (k, v) in note {
        match k.as_str() {
            "title" | "text" if v.is_string() => {}
            "tags"
                if v.as_array().is_some_and(|a| {
                    a.iter().all(|t| {
                        t.as_str().is_some_and(|s| {
                            !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase())
                        })
                    })
                }) => {}
            _ => return Err(format!("{k}: not a valid value ({v})")),
        }
    }
    if !note.contains_key("title") {
        return Err("title is required".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// A status service (rotation tests)
// ---------------------------------------------------------------------------------------

/// `GET /status` → `{"status": "ok"}`; `POST /restart` with a JSON body → `202` echoing
/// it. Anything else is `404`. Stops when dropped.
pub struct FakeStatus {
    url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeStatus {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeStatus {
    pub async fn start() -> FakeStatus {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let router = Router::new()
            .fallback(status_handle)
            .with_state(requests.clone());
        let (url, server) = serve(router).await;
        FakeStatus {
            url,
            requests,
            server,
        }
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn status_handle(
    State(requests): State<Arc<Mutex<Vec<Recorded>>>>,
    request: Request,
) -> Response {
    let (r, _) = record(request).await;
    requests.lock().unwrap().push(r.clone());
    match (r.method.as_str(), r.path.as_str()) {
        ("GET", "/status") => Json(json!({"status": "ok"})).into_response(),
        ("POST", "/restart") => match r.json() {
            Value::Object(m) => {
                (StatusCode::ACCEPTED, Json(json!({"restarting": m}))).into_response()
            }
            _ => (StatusCode::BAD_REQUEST, "a JSON object body is required").into_response(),
        },
        _ => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_refuses_junk() {
        for s in ["", "a", "ab", "abc", "abcd", "hello, world\n"] {
            let e = base64_encode(s.as_bytes());
            assert_eq!(base64_decode(&e).unwrap(), s.as_bytes(), "{e}");
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert!(base64_decode("aGVsbG8").is_none());
        assert!(base64_decode("hello world!").is_none());
        assert!(base64_decode("a=bc").is_none());
    }
}
