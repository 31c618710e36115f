//! A small blocking HTTP client for guests, over `wasi:http/outgoing-handler`.
//!
//! Connectors reach their external systems only through the host's policed outbound
//! HTTP (the host allows exactly the hosts the manifest declares, narrowed by the
//! operator). The raw wasi:http API is resource-heavy and easy to misuse (child resources
//! must be dropped before their parents, bodies written after the request is handed
//! over, ...); this module hides it behind `get` / `request`.
//!
//! Every call blocks the (single-threaded) guest until the whole response body has been
//! read. Bodies are capped at [`MAX_RESPONSE_BYTES`] so a hostile or broken server cannot
//! run the instance out of memory. Outside a component (native unit tests) every request
//! fails with [`HttpError::Unsupported`].

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest response body a request reads (16 MiB); larger ones fail with
/// [`HttpError::BodyTooLarge`].
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// An outbound HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The method, e.g. `GET`.
    pub method: String,
    /// The absolute `http://` or `https://` URL.
    pub url: String,
    /// Request headers, in order.
    pub headers: Vec<(String, String)>,
    /// The request body (empty for none).
    pub body: Vec<u8>,
    /// Connect, first-byte and between-bytes timeout; `None` leaves the host's defaults.
    pub timeout: Option<Duration>,
}

impl Request {
    /// A request with `method` to `url`, no headers and no body.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Request {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// Appends the query parameter `name=value` to the URL, both percent-encoded (a
    /// space becomes `%20`, `&` `%26`): `Request::get(base).query("q", "New York")`.
    pub fn query(mut self, name: &str, value: &str) -> Self {
        self.url = Url::from(std::mem::take(&mut self.url))
            .query(name, value)
            .build();
        self
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Request::new("GET", url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Request::new("POST", url)
    }

    /// A `PUT` request.
    pub fn put(url: impl Into<String>) -> Self {
        Request::new("PUT", url)
    }

    /// A `PATCH` request.
    pub fn patch(url: impl Into<String>) -> Self {
        Request::new("PATCH", url)
    }

    /// A `DELETE` request.
    pub fn delete(url: impl Into<String>) -> Self {
        Request::new("DELETE", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `content-type: application/json`.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Self, HttpError> {
        self.body = serde_json::to_vec(value)
            .map_err(|e| HttpError::InvalidRequest(format!("body is not serializable: {e}")))?;
        self.headers
            .push(("content-type".to_owned(), "application/json".to_owned()));
        Ok(self)
    }

    /// Sets the connect, first-byte and between-bytes timeouts.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sends the request; see [`request`].
    pub fn send(self) -> Result<Response, HttpError> {
        request(self)
    }
}

/// A complete HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Response headers (names as the host gives them, lower-case), in order.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 is replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    /// The body parsed as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| HttpError::Decode(e.to_string()))
    }

    /// `Err(HttpError::Status)` unless the status is 2xx.
    pub fn error_for_status(self) -> Result<Self, HttpError> {
        if self.is_success() {
            Ok(self)
        } else {
            let mut body = self.text().into_owned();
            truncate_utf8(&mut body, 512);
            Err(HttpError::Status {
                status: self.status,
                body,
            })
        }
    }
}

/// Why a request produced no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not an absolute `http://` or `https://` URL.
    InvalidUrl(String),
    /// A header, the method or the body could not be used.
    InvalidRequest(String),
    /// The host refused the request (the destination is not an allowed host).
    Denied(String),
    /// The request failed on the way (DNS, connection, TLS, timeout, protocol).
    Transport(String),
    /// The response body is larger than the limit.
    BodyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// [`Response::error_for_status`] on a non-2xx response.
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// [`Response::json`] could not parse the body.
    Decode(String),
    /// Not running inside a component: there is no outbound HTTP.
    Unsupported,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::InvalidUrl(m) => write!(f, "invalid URL: {m}"),
            HttpError::InvalidRequest(m) => write!(f, "invalid request: {m}"),
            HttpError::Denied(m) => write!(f, "request denied by the host: {m}"),
            HttpError::Transport(m) => write!(f, "HTTP request failed: {m}"),
            HttpError::BodyTooLarge { limit } => {
                write!(f, "response body is larger than the limit of {limit} bytes")
            }
            HttpError::Status { status, body } => write!(f, "HTTP status {status}: {body}"),
            HttpError::Decode(m) => write!(f, "response body is not the expected JSON: {m}"),
            HttpError::Unsupported => f.write_str(
                "outbound HTTP is only available inside a component run by connector-host",
            ),
        }
    }
}

impl std::error::Error for HttpError {}

/// Characters a URL component keeps as they are: RFC 3986's unreserved set. Everything
/// else (spaces, `&`, `=`, `/`, `?`, `#`, `+`, non-ASCII) is percent-encoded.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A URL built from a base, path segments and query parameters, each segment and
/// parameter percent-encoded, so that values from tool arguments (a city name with a
/// space, a search with `&`) can neither break the URL nor change its meaning.
///
/// ```
/// use connector_sdk::http::Url;
/// let url = Url::new("https://api.example.com/v1")
///     .segment("cities")
///     .segment("São Paulo")
///     .query("units", "metric")
///     .query("q", "rain & wind")
///     .build();
/// assert_eq!(
///     url,
///     "https://api.example.com/v1/cities/S%C3%A3o%20Paulo?units=metric&q=rain%20%26%20wind"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    base: String,
    query: Vec<String>,
}

impl Url {
    /// Starts from `base` (scheme, host and any fixed path, used as given).
    pub fn new(base: impl Into<String>) -> Self {
        let base = base.into();
        // A base that already has a query keeps it; new parameters follow it.
        match base.split_once('?') {
            Some((path, query)) if !query.is_empty() => Url {
                base: path.to_owned(),
                query: query.split('&').map(str::to_owned).collect(),
            },
            Some((path, _)) => Url {
                base: path.to_owned(),
                query: Vec::new(),
            },
            None => Url {
                base,
                query: Vec::new(),
            },
        }
    }

    /// Appends one path segment, percent-encoded (a `/` in it is encoded too).
    pub fn segment(mut self, segment: &str) -> Self {
        if !self.base.ends_with('/') {
            self.base.push('/');
        }
        self.base
            .extend(percent_encoding::utf8_percent_encode(segment, COMPONENT));
        self
    }

    /// Appends the query parameter `name=value`, both percent-encoded.
    pub fn query(mut self, name: &str, value: &str) -> Self {
        self.query.push(format!(
            "{}={}",
            percent_encoding::utf8_percent_encode(name, COMPONENT),
            percent_encoding::utf8_percent_encode(value, COMPONENT)
        ));
        self
    }

    /// The URL as text.
    pub fn build(&self) -> String {
        if self.query.is_empty() {
            self.base.clone()
        } else {
            format!("{}?{}", self.base, self.query.join("&"))
        }
    }
}

impl From<String> for Url {
    fn from(url: String) -> Self {
        Url::new(url)
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.build())
    }
}

impl From<Url> for String {
    fn from(url: Url) -> Self {
        url.build()
    }
}

/// `GET url`.
pub fn get(url: impl Into<String>) -> Result<Response, HttpError> {
    request(Request::get(url))
}

/// Sends `req` and reads the whole response (up to [`MAX_RESPONSE_BYTES`]).
pub fn request(req: Request) -> Result<Response, HttpError> {
    let target = Target::parse(&req.url)?;
    if req.method.is_empty() || !req.method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(HttpError::InvalidRequest(format!(
            "method `{}` is not a token",
            req.method
        )));
    }
    imp::send(&req, &target)
}

/// The headers a request goes out with: its own, plus `Content-Length` when the body's
/// length is known and the caller set no length or transfer encoding. Without it the
/// host's HTTP client streams the body chunked (`Transfer-Encoding: chunked`), which
/// servers that need a length refuse (`411 Length Required`) and some read as empty.
/// A `GET`, `HEAD`, `DELETE` or `OPTIONS` without a body gets none (as browsers send
/// them); every other method gets one, `0` for an empty body.
// Outside a component nothing is sent (see `imp`); the unit tests still check it.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn headers_to_send(req: &Request) -> Vec<(String, String)> {
    let mut headers = req.headers.clone();
    let framed = headers.iter().any(|(k, _)| {
        k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
    });
    let bodiless = ["GET", "HEAD", "DELETE", "OPTIONS"]
        .iter()
        .any(|m| req.method.eq_ignore_ascii_case(m));
    if !framed && (!req.body.is_empty() || !bodiless) {
        headers.push(("content-length".to_owned(), req.body.len().to_string()));
    }
    headers
}

/// The parts of a URL that wasi:http wants.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: Cow<'a, str>,
}

impl<'a> Target<'a> {
    fn parse(url: &'a str) -> Result<Self, HttpError> {
        let bad = |why: &str| HttpError::InvalidUrl(format!("`{url}`: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not an absolute URL"))?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return Err(bad("the scheme must be http or https"));
        };
        if rest
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(bad(
                "contains whitespace or control characters; build URLs from values with `http::Url` (it percent-encodes path segments and query values)",
            ));
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad("user info in URLs is not supported"));
        }
        let path_with_query = if path.is_empty() {
            Cow::Borrowed("/")
        } else if path.starts_with('?') {
            Cow::Owned(format!("/{path}"))
        } else {
            Cow::Borrowed(path)
        };
        Ok(Target {
            https,
            authority,
            path_with_query,
        })
    }
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::{HttpError, Request, Response, Target};

    pub(super) fn send(_req: &Request, _target: &Target<'_>) -> Result<Response, HttpError> {
        Err(HttpError::Unsupported)
    }
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::{HttpError, Request, Response, Target, MAX_RESPONSE_BYTES};
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions,
        Scheme,
    };
    use wasip2::io::streams::StreamError;

    /// wasi:http writes at most 4096 bytes per `blocking-write-and-flush`.
    const WRITE_CHUNK: usize = 4096;
    const READ_CHUNK: u64 = 64 * 1024;

    fn method(m: &str) -> Method {
        match m.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        }
    }

    fn error_code(e: ErrorCode) -> HttpError {
        match e {
            ErrorCode::HttpRequestDenied => {
                HttpError::Denied("the destination is not an allowed host".to_owned())
            }
            ErrorCode::HttpResponseBodySize(_) => HttpError::BodyTooLarge {
                limit: MAX_RESPONSE_BYTES,
            },
            other => HttpError::Transport(format!("{other:?}")),
        }
    }

    fn stream_error(e: StreamError) -> HttpError {
        match e {
            StreamError::Closed => HttpError::Transport("stream closed early".to_owned()),
            StreamError::LastOperationFailed(err) => {
                match wasip2::http::types::http_error_code(&err) {
                    Some(code) => error_code(code),
                    None => HttpError::Transport(err.to_debug_string()),
                }
            }
        }
    }

    pub(super) fn send(req: &Request, target: &Target<'_>) -> Result<Response, HttpError> {
        let entries: Vec<(String, Vec<u8>)> = super::headers_to_send(req)
            .iter()
            .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
            .collect();
        let headers = Fields::from_list(&entries)
            .map_err(|e| HttpError::InvalidRequest(format!("unusable header: {e:?}")))?;
        let outgoing = OutgoingRequest::new(headers);
        outgoing
            .set_method(&method(&req.method))
            .map_err(|()| HttpError::InvalidRequest(format!("method `{}`", req.method)))?;
        let scheme = if target.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        outgoing
            .set_scheme(Some(&scheme))
            .map_err(|()| HttpError::InvalidUrl("unusable scheme".to_owned()))?;
        outgoing
            .set_authority(Some(target.authority))
            .map_err(|()| HttpError::InvalidUrl(format!("host `{}`", target.authority)))?;
        outgoing
            .set_path_with_query(Some(&target.path_with_query))
            .map_err(|()| HttpError::InvalidUrl(format!("path `{}`", target.path_with_query)))?;
        let body = outgoing
            .body()
            .map_err(|()| HttpError::InvalidRequest("request body unavailable".to_owned()))?;

        let options = req.timeout.map(|t| {
            let nanos = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let options = RequestOptions::new();
            // A host may not support every timeout; ignore the ones it refuses.
            let _ = options.set_connect_timeout(Some(nanos));
            let _ = options.set_first_byte_timeout(Some(nanos));
            let _ = options.set_between_bytes_timeout(Some(nanos));
            options
        });

        // Hand the request over first, then stream the body: writing a large body before
        // `handle` could block forever on a full pipe.
        let future = outgoing_handler::handle(outgoing, options).map_err(error_code)?;
        {
            let stream = body
                .write()
                .map_err(|()| HttpError::InvalidRequest("request body unavailable".to_owned()))?;
            for chunk in req.body.chunks(WRITE_CHUNK) {
                stream
                    .blocking_write_and_flush(chunk)
                    .map_err(stream_error)?;
            }
            // The stream is a child of the body: drop it before finishing the body.
        }
        OutgoingBody::finish(body, None).map_err(error_code)?;

        let response = loop {
            match future.get() {
                Some(result) => break result,
                None => future.subscribe().block(),
            }
        };
        let response = response
            .map_err(|()| HttpError::Transport("response already taken".to_owned()))?
            .map_err(error_code)?;

        let status = response.status();
        let headers: Vec<(String, String)> = {
            let fields = response.headers();
            let entries = fields.entries();
            entries
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                .collect()
        };
        let declared = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > MAX_RESPONSE_BYTES as u64) {
            return Err(HttpError::BodyTooLarge {
                limit: MAX_RESPONSE_BYTES,
            });
        }

        let incoming = response
            .consume()
            .map_err(|()| HttpError::Transport("response body unavailable".to_owned()))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| HttpError::Transport("response body unavailable".to_owned()))?;
            loop {
                match stream.blocking_read(READ_CHUNK) {
                    Ok(chunk) => {
                        if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                            return Err(HttpError::BodyTooLarge {
                                limit: MAX_RESPONSE_BYTES,
                            });
                        }
                        bytes.extend_from_slice(&chunk);
                    }
                    Err(StreamError::Closed) => break,
                    Err(e) => return Err(stream_error(e)),
                }
            }
        }
        drop(IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let t = Target::parse("https://api.github.com/repos/a/b?x=1#frag").unwrap();
        assert!(t.https);
        assert_eq!(t.authority, "api.github.com");
        assert_eq!(t.path_with_query, "/repos/a/b?x=1");

        let t = Target::parse("http://127.0.0.1:8080").unwrap();
        assert!(!t.https);
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path_with_query, "/");

        let t = Target::parse("HTTP://example.com?q=2").unwrap();
        assert_eq!(t.path_with_query, "/?q=2");
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "example.com/x",
            "ftp://example.com/",
            "https:///path",
            "https://user:pw@example.com/",
            "https://exa mple.com/",
        ] {
            assert!(
                matches!(Target::parse(url), Err(HttpError::InvalidUrl(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn urls_encode_segments_and_query_values() {
        let url = Url::new("https://wttr.in")
            .segment("New York")
            .query("format", "j1")
            .build();
        assert_eq!(url, "https://wttr.in/New%20York?format=j1");
        assert!(
            Target::parse(&url).is_ok(),
            "a space no longer breaks the URL"
        );
        let req = Request::get("https://api.example.com/weather?units=metric")
            .query("city", "New York")
            .query("a&b", "x=y/z?#+");
        assert_eq!(
            req.url,
            "https://api.example.com/weather?units=metric&city=New%20York&a%26b=x%3Dy%2Fz%3F%23%2B"
        );
        assert_eq!(
            Url::new("http://h/a/").segment("..").build(),
            "http://h/a/.."
        );
        assert_eq!(
            Url::new("http://h/").segment("a/b").build(),
            "http://h/a%2Fb"
        );
        assert_eq!(
            Url::new("http://h/x?").query("k", "").build(),
            "http://h/x?k="
        );
    }

    #[test]
    fn a_known_body_length_is_sent() {
        let length = |req: &Request| {
            headers_to_send(req)
                .into_iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
        };
        let post = Request::post("http://h/").body("hello");
        assert_eq!(length(&post), ["5"]);
        assert_eq!(length(&Request::put("http://h/")), ["0"]);
        assert_eq!(length(&Request::get("http://h/")), Vec::<String>::new());
        assert_eq!(length(&Request::delete("http://h/").body("x")), ["1"]);
        let own = Request::post("http://h/")
            .header("Content-Length", "5")
            .body("hello");
        assert_eq!(
            length(&own),
            ["5"],
            "the caller's own header is kept, not doubled"
        );
        let chunked = Request::post("http://h/")
            .header("transfer-encoding", "chunked")
            .body("hello");
        assert!(length(&chunked).is_empty());
    }

    #[test]
    fn native_requests_are_unsupported() {
        assert_eq!(
            get("https://example.com/").unwrap_err(),
            HttpError::Unsupported
        );
        assert!(matches!(
            request(Request::new("GE T", "https://example.com/")),
            Err(HttpError::InvalidRequest(_))
        ));
    }

    #[test]
    fn response_helpers() {
        let r = Response {
            status: 404,
            headers: vec![("content-type".into(), "application/json".into())],
            body: br#"{"a":1}"#.to_vec(),
        };
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(r.json::<serde_json::Value>().unwrap()["a"], 1);
        assert_eq!(r.text(), r#"{"a":1}"#);
        assert!(matches!(
            r.error_for_status(),
            Err(HttpError::Status { status: 404, .. })
        ));
    }
}
