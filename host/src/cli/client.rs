//! The one HTTP client every operator command uses: builds `/api/v1` URLs (each path
//! segment escaped), attaches the bearer token, and turns error bodies, unreachable hosts
//! and timeouts into [`CliError`]s an operator can act on.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::blocking::{Client as Http, RequestBuilder};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

use super::{CliError, RemoteArgs};
use connector_core::config::{ENV_DATA_DIR, ENV_OPERATOR_TOKEN};

/// Base path of the HTTP API.
const API_BASE: [&str; 2] = ["api", "v1"];
/// How long a request may take (installing compiles a component; a tool call may run up
/// to the host's call timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from the host: far above any page the API serves, and a
/// bound on what a server at `--url` that streams without end can make this process hold.
const MAX_ANSWER_BYTES: u64 = 256 * 1024 * 1024;
/// How often a write refused as racing another replica's is sent in all.
const STATE_CHANGED_ATTEMPTS: u64 = 4;

/// The body of a request.
#[derive(Clone)]
pub enum Body {
    /// No body.
    Empty,
    /// A JSON document.
    Json(Value),
    /// A WebAssembly component (`Content-Type: application/wasm`).
    Wasm(Vec<u8>),
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The status (2xx).
    pub status: StatusCode,
    /// The JSON body; `None` for an empty body (`204`). A body that is not JSON comes
    /// back as a JSON string.
    pub body: Option<Value>,
}

impl Reply {
    /// `created` for a `201`, `updated` otherwise: what a `PUT` did.
    pub fn written(&self) -> &'static str {
        if self.status == StatusCode::CREATED {
            "created"
        } else {
            "updated"
        }
    }

    /// Prints the body pretty to stdout, or `done` to stderr when there is no body.
    pub fn print(&self, done: &str) {
        match &self.body {
            Some(body) => super::print_json(body),
            None if !done.is_empty() => super::print_err(done),
            None => {}
        }
    }
}

/// A client of one running host.
pub struct Client {
    base: Url,
    token: Option<String>,
    http: Http,
    /// The largest answer read ([`MAX_ANSWER_BYTES`]).
    max_answer: u64,
}

impl Client {
    /// A client for `--url` / `--token` (see [`resolve_token`]).
    pub fn new(args: &RemoteArgs) -> Result<Self, CliError> {
        let base = parse_base_url(&args.url)?;
        let token = resolve_token(
            args.token.as_deref(),
            std::env::var(ENV_DATA_DIR).ok().as_deref(),
        );
        if let Some(token) = &token {
            if reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                return Err(CliError::usage(
                    "the token contains characters that cannot be sent in an HTTP header",
                ));
            }
        }
        let http = Http::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("connector-host-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::failed(format!("could not create the HTTP client: {e}")))?;
        Ok(Self {
            base,
            token,
            http,
            max_answer: MAX_ANSWER_BYTES,
        })
    }

    /// The host's base URL.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `base/api/v1/<segments...>?<query>`, every segment escaped.
    pub fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        api_url(&self.base, segments, query)
    }

    /// `GET`.
    pub fn get(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Reply, CliError> {
        self.send(Method::GET, segments, query, Body::Empty)
    }

    /// Every entry of a paged list (`{"<key>": [...], "next": cursor | null}`), fetched
    /// page by page with the largest page the API serves.
    pub fn get_all(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
        key: &str,
    ) -> Result<Vec<Value>, CliError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut q = query.to_vec();
            q.push(("limit", "500".to_string()));
            if let Some(a) = &after {
                q.push(("after", a.clone()));
            }
            let body = self.get(segments, &q)?.body.unwrap_or(Value::Null);
            let Some(page) = body.get(key).and_then(Value::as_array) else {
                return Err(CliError::failed(format!(
                    "the host answered without a `{key}` list; check that --url names a connector host"
                )));
            };
            all.extend(page.iter().cloned());
            match body.get("next").and_then(Value::as_str) {
                // A cursor that does not move on would never end.
                Some(next) if after.as_deref() != Some(next) && !page.is_empty() => {
                    after = Some(next.to_string())
                }
                _ => return Ok(all),
            }
        }
    }

    /// Opens `GET` on an endpoint that answers with an endless stream (Server-Sent
    /// Events): no overall time limit, `Last-Event-ID` set to `last_event_id`. An error
    /// answer is read and returned like any other.
    pub fn open_stream(
        &self,
        segments: &[&str],
        last_event_id: Option<&str>,
    ) -> Result<reqwest::blocking::Response, CliError> {
        let url = self.url(segments, &[]);
        let http = Http::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(None)
            .user_agent(concat!("connector-host-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::failed(format!("could not create the HTTP client: {e}")))?;
        let mut request = http
            .get(url)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().map_err(|e| self.transport_error(&e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = connector_remote_answer::read_at_most_blocking(response, 1024 * 1024)
            .unwrap_or_default();
        interpret(
            status,
            &String::from_utf8_lossy(&body),
            self.token.is_some(),
        )?;
        Err(CliError::failed(format!("the host answered {status}")))
    }

    /// `PUT` with a JSON body.
    pub fn put(&self, segments: &[&str], body: Value) -> Result<Reply, CliError> {
        self.send(Method::PUT, segments, &[], Body::Json(body))
    }

    /// `POST`.
    pub fn post(&self, segments: &[&str], body: Body) -> Result<Reply, CliError> {
        self.send(Method::POST, segments, &[], body)
    }

    /// `DELETE`.
    pub fn delete(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Reply, CliError> {
        self.send(Method::DELETE, segments, query, Body::Empty)
    }

    /// Sends one request and interprets the answer. A write another replica's write
    /// raced (`409 state_changed`: nothing was applied) is sent again, a few times.
    pub fn send(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Body,
    ) -> Result<Reply, CliError> {
        let mut attempt = 1;
        loop {
            let (status, text) = self.send_once(method.clone(), segments, query, body.clone())?;
            let raced = status == reqwest::StatusCode::CONFLICT
                && serde_json::from_str::<Value>(&text)
                    .is_ok_and(|v| v["error"]["code"] == "state_changed");
            if raced && attempt < STATE_CHANGED_ATTEMPTS {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20 * attempt));
                continue;
            }
            return interpret(status, &text, self.token.is_some());
        }
    }

    fn send_once(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Body,
    ) -> Result<(reqwest::StatusCode, String), CliError> {
        let url = self.url(segments, query);
        let mut request: RequestBuilder = self.http.request(method.clone(), url.clone());
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        request = match body {
            Body::Empty => request,
            Body::Json(value) => request.json(&value),
            Body::Wasm(bytes) => request.header(CONTENT_TYPE, "application/wasm").body(bytes),
        };
        tracing::debug!(%method, %url, "request");
        let response = request.send().map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let body =
            connector_remote_answer::read_at_most_blocking(response, self.max_answer).map_err(|e| {
                CliError::failed(match e {
                    connector_remote_answer::AnswerError::TooLarge { limit } => format!(
                        "the answer of {method} {url} is larger than {}, more than this command reads; \
                         ask for less (a smaller --limit), or check that --url names a connector host",
                        connector_remote_answer::size(limit)
                    ),
                    e => format!("reading the answer of {method} {url} failed: {e}"),
                })
            })?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    fn transport_error(&self, e: &reqwest::Error) -> CliError {
        let base = self.base.as_str().trim_end_matches('/');
        if e.is_connect() {
            return CliError::failed(format!(
                "{UNREACHABLE} {} ({}).\nStart it with `connector-host serve`, or point this command at a running host with --url or CONNECTOR_HOST_URL.",
                base,
                root_cause(e)
            ));
        }
        if e.is_timeout() {
            return CliError::failed(format!(
                "{NO_ANSWER} {} did not answer within {} s",
                base,
                REQUEST_TIMEOUT.as_secs()
            ));
        }
        CliError::failed(format!(
            "the request to {} failed: {}",
            base,
            connector_remote_answer::error_chain(e)
        ))
    }
}

/// Parses `--url`: an `http://` or `https://` base URL.
pub fn parse_base_url(raw: &str) -> Result<Url, CliError> {
    let bad = || {
        CliError::usage(format!(
            "--url `{raw}` is not an http:// or https:// URL (for example {})",
            super::DEFAULT_URL
        ))
    };
    let url = Url::parse(raw.trim()).map_err(|_| bad())?;
    if !matches!(url.scheme(), "http" | "https") || url.cannot_be_a_base() || url.host().is_none() {
        return Err(bad());
    }
    Ok(url)
}

/// `base/api/v1/<segments...>?<query>`: keeps any path prefix of `base` (a host behind a
/// reverse proxy) and escapes every segment, so an id can never change the route.
pub fn api_url(base: &Url, segments: &[&str], query: &[(&str, String)]) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        path.extend(API_BASE);
        path.extend(segments);
    }
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    url
}

/// The token to send: `--token` / `$CONNECTOR_HOST_OPERATOR_TOKEN` (clap has already
/// merged those into `flag`), else the `operator-token` file `serve` writes into its data
/// directory (`data_dir`, default `./data`).
pub fn resolve_token(flag: Option<&str>, data_dir: Option<&str>) -> Option<String> {
    if let Some(token) = flag.map(str::trim).filter(|t| !t.is_empty()) {
        return Some(token.to_string());
    }
    let dir = data_dir
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("./data"));
    let text = std::fs::read_to_string(dir.join("operator-token")).ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// Turns a status and body into a [`Reply`] or the contract's error body into a
/// [`CliError`]: `code: message`, then `details` pretty-printed.
pub fn interpret(status: StatusCode, text: &str, sent_token: bool) -> Result<Reply, CliError> {
    let json = if text.trim().is_empty() {
        None
    } else {
        Some(
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_string())),
        )
    };
    if status.is_success() {
        return Ok(Reply { status, body: json });
    }
    let error = json
        .as_ref()
        .and_then(|j| j.get("error"))
        .filter(|e| e.is_object());
    let mut message = match error {
        Some(error) => {
            let code = error.get("code").and_then(Value::as_str).unwrap_or("error");
            let text = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)");
            let mut message = format!("{code}: {}", in_cli_terms(text));
            if let Some(details) = error.get("details").filter(|d| !d.is_null()) {
                let details =
                    serde_json::to_string_pretty(details).unwrap_or_else(|_| details.to_string());
                message.push_str("\ndetails: ");
                message.push_str(&details);
            }
            message
        }
        None => {
            let mut body: String = text.trim().chars().take(500).collect();
            if body.is_empty() {
                body = "(empty body)".into();
            }
            format!("HTTP {status}: {body}")
        }
    };
    if status == StatusCode::UNAUTHORIZED && !sent_token {
        message.push_str(&format!(
            "\nhint: no token was sent; pass --token, set {ENV_OPERATOR_TOKEN}, or run where the host's data/operator-token file is"
        ));
    }
    Err(CliError::failed(message))
}

/// Whether `e` says the host did not answer at all (nothing listening, refused, or no
/// answer in time), rather than answering with a refusal.
pub fn is_unreachable(e: &CliError) -> bool {
    e.message.starts_with(UNREACHABLE) || e.message.starts_with(NO_ANSWER)
}

const UNREACHABLE: &str = "the host is not reachable at";
const NO_ANSWER: &str = "the host at";

/// The host's error message with the HTTP query parameters it suggests written as the
/// flags of the commands that send them (`connectors install --force`,
/// `connectors remove --force`, `connectors install --accept-tool-changes`).
fn in_cli_terms(message: &str) -> String {
    message
        .replace("delete with ?force=true", "remove with --force")
        .replace("with ?force=true", "with --force")
        .replace("with ?acceptToolChanges=true", "with --accept-tool-changes")
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-thread HTTP server answering `answers` in turn (one per connection);
    /// returns its URL and how many requests it saw.
    fn scripted_server(
        answers: Vec<(u16, &'static str)>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for (status, body) in answers {
                let Ok((stream, _)) = listener.accept() else {
                    return;
                };
                let mut reader = BufReader::new(stream);
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut request_body = vec![0; length];
                let _ = reader.read_exact(&mut request_body);
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (url, seen)
    }

    fn client_of(url: &str) -> Client {
        Client::new(&RemoteArgs {
            url: url.into(),
            token: Some("t".into()),
        })
        .expect("client")
    }

    #[test]
    fn a_write_that_raced_another_replica_is_sent_again() {
        let raced = r#"{"error": {"code": "state_changed", "message": "raced"}}"#;
        let (url, seen) =
            scripted_server(vec![(409, raced), (409, raced), (201, r#"{"id": "eng"}"#)]);
        let reply = client_of(&url)
            .put(&["units", "eng"], serde_json::json!({}))
            .expect("the third attempt is applied");
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 3);

        // Other conflicts are answers, not retried.
        let other = r#"{"error": {"code": "has_children", "message": "no"}}"#;
        let (url, seen) = scripted_server(vec![(409, other), (201, "{}")]);
        let err = client_of(&url)
            .delete(&["units", "eng"], &[])
            .expect_err("a real conflict is reported");
        assert!(
            err.message.contains("has_children") || err.message.contains("no"),
            "{}",
            err.message
        );
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn an_endless_answer_is_refused_past_the_limit() {
        let (url, _) = connector_remote_answer::endless::start("application/json");
        let mut client = client_of(&url);
        client.max_answer = 4 * 1024 * 1024;
        let started = std::time::Instant::now();
        let err = client
            .get(&["units"], &[])
            .expect_err("an endless answer is refused");
        assert_eq!(err.code, 1);
        assert!(
            err.message.starts_with("the answer of GET ")
                && err.message.contains("is larger than 4 MiB"),
            "{}",
            err.message
        );
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn urls_escape_segments_and_keep_prefixes() {
        let base = parse_base_url("http://127.0.0.1:8787").expect("url");
        assert_eq!(
            api_url(&base, &["units", "eng"], &[]).as_str(),
            "http://127.0.0.1:8787/api/v1/units/eng"
        );
        assert_eq!(
            api_url(&base, &["units", "a/b?c"], &[("limit", "5".into())]).as_str(),
            "http://127.0.0.1:8787/api/v1/units/a%2Fb%3Fc?limit=5"
        );
        let base = parse_base_url("https://example.com/hosts/one/").expect("url");
        assert_eq!(
            api_url(&base, &["connectors"], &[]).as_str(),
            "https://example.com/hosts/one/api/v1/connectors"
        );
        assert_eq!(
            parse_base_url("127.0.0.1:8787")
                .expect_err("no scheme")
                .code,
            2
        );
        assert!(parse_base_url("ftp://x").is_err());
    }

    #[test]
    fn error_bodies_become_code_message_details() {
        let body = r#"{"error": {"code": "invalid_arguments", "message": "bad args", "details": {"violations": [{"pointer": "/text"}]}}}"#;
        let err = interpret(StatusCode::UNPROCESSABLE_ENTITY, body, true).expect_err("error");
        assert_eq!(err.code, 1);
        assert!(
            err.message
                .starts_with("invalid_arguments: bad args\ndetails: "),
            "{}",
            err.message
        );
        assert!(err.message.contains("/text"));

        let err =
            interpret(StatusCode::BAD_GATEWAY, "<html>proxy</html>", true).expect_err("error");
        assert!(
            err.message.starts_with("HTTP 502 Bad Gateway: <html>"),
            "{}",
            err.message
        );

        let err = interpret(
            StatusCode::UNAUTHORIZED,
            r#"{"error":{"code":"unauthenticated","message":"no"}}"#,
            false,
        )
        .expect_err("401");
        assert!(err.message.contains("hint:"), "{}", err.message);

        let ok = interpret(StatusCode::NO_CONTENT, "", true).expect("ok");
        assert_eq!(ok.body, None);
        let ok = interpret(StatusCode::CREATED, r#"{"id": "x"}"#, true).expect("ok");
        assert_eq!(ok.body, Some(serde_json::json!({"id": "x"})));
    }

    #[test]
    fn token_falls_back_to_the_data_dir_file() {
        assert_eq!(resolve_token(Some(" flag "), None).as_deref(), Some("flag"));
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_str().expect("utf-8 path");
        assert_eq!(resolve_token(None, Some(data)), None);
        std::fs::write(dir.path().join("operator-token"), "from-file\n").expect("write");
        assert_eq!(
            resolve_token(None, Some(data)).as_deref(),
            Some("from-file")
        );
        assert_eq!(
            resolve_token(Some(""), Some(data)).as_deref(),
            Some("from-file")
        );
    }

    #[test]
    fn unreachable_host_says_how_to_start_it() {
        // Port 9 on loopback (discard) is practically never listening.
        let client = Client::new(&RemoteArgs {
            url: "http://127.0.0.1:9".into(),
            token: Some("t".into()),
        })
        .expect("client");
        let err = client.get(&["connectors"], &[]).expect_err("unreachable");
        assert!(
            err.message.contains("not reachable at http://127.0.0.1:9"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("connector-host serve"),
            "{}",
            err.message
        );
    }
}
