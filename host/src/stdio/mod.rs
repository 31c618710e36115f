//! The stdio server behind `connector-host mcp`: newline-delimited JSON-RPC on
//! stdin/stdout, for agent runtimes that only launch local MCP servers, forwarded to a
//! host's Streamable HTTP endpoint ([`run`], the bridge), or to that same endpoint served
//! in this process on the host's own data ([`run_local`], see [`local`]). Both
//! speak to the endpoint in the same terms (its requests, headers and answers), so
//! everything below holds for both; only the transport differs.
//!
//! - Each stdin line is one JSON-RPC message (or batch), POSTed as is. `initialize` is
//!   sent before the next line is read and its `Mcp-Session-Id` and negotiated revision
//!   are kept for every later message; other requests run concurrently (their answers
//!   may come out of order, as JSON-RPC allows); notifications and client responses are
//!   sent in order.
//! - Answers (`application/json`, or `text/event-stream` from other servers) become
//!   stdout lines. An HTTP failure without a JSON-RPC body becomes a JSON-RPC error for
//!   that request id, so the client never waits for an answer that cannot come; so does
//!   an answer (or one event of a stream) larger than 64 MiB, which is not read further.
//! - A request whose `params._meta` names a protocol revision (2026-07-28, stateless) is
//!   POSTed without a session, with `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//!   taken from its body (a name that is not plain ASCII as `=?base64?…?=`). Every
//!   message of its answer is relayed: a `subscriptions/listen` answer is a stream of
//!   notifications until its final result. A `notifications/cancelled` naming one of
//!   these requests closes its HTTP request, which is how that revision cancels; at end
//!   of input open subscriptions are closed.
//! - After `initialize` a GET stream relays the server's notifications
//!   (`notifications/tools/list_changed`) to stdout, reconnecting with backoff.
//! - When the host forgets the session (`404`, e.g. after a restart), the bridge replays
//!   the client's `initialize` and `notifications/initialized` once and retries the
//!   message: the client never sees the session change.
//! - At end of input the bridge waits for answers in flight (up to 5 s), ends the
//!   session with `DELETE` and exits 0. stdout carries only JSON-RPC; diagnostics go to
//!   stderr.

pub mod local;

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use reqwest::{StatusCode, Url};
use serde_json::{json, Value};

use connector_mcp_protocol::client::{self, BodyKind};
use connector_mcp_protocol::jsonrpc::{HEADER_MISMATCH, INTERNAL_ERROR, PARSE_ERROR};
use connector_mcp_protocol::revision::{SESSION_HEADER, VERSION_HEADER};
use connector_mcp_protocol::sse::EventStreamDecoder;

/// Where the bridge forwards to.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The MCP endpoint, e.g. `http://127.0.0.1:8787/mcp/agents/ada`.
    pub endpoint: Url,
    /// The bearer token (an agent token, or the operator token).
    pub token: Option<String>,
}

/// Why the stdio server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No async runtime could be built.
    #[error("could not start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The thread reading stdin could not be started.
    #[error("could not start the stdin reader")]
    StdinReader(#[source] std::io::Error),
    /// The bearer token cannot be a header value.
    #[error("the token contains characters that cannot be sent in an HTTP header")]
    TokenNotAHeader,
    /// The HTTP client could not be built.
    #[error("could not create the HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// The host's data could not be served (the local mode).
    #[error(transparent)]
    Local(#[from] local::OpenError),
}

/// Why one request to the endpoint got no answer.
#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error(transparent)]
    Reqwest(reqwest::Error),
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    #[error("cannot connect to {authority}")]
    Connect {
        authority: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Request(http::Error),
    #[error(transparent)]
    Hyper(hyper::Error),
}

/// Runs the bridge on this process's stdin/stdout until stdin ends.
pub fn run(config: BridgeConfig) -> Result<(), StartError> {
    serve_stdio(async move { Bridge::remote(config) })
}

/// Serves agent `agent`'s tools on this process's stdin/stdout from the host's data named
/// by `config`, opened here beside any running `serve` (see [`local`]), until
/// stdin ends.
pub fn run_local(
    config: connector_core::config::HostConfig,
    agent: connector_model::ids::AgentId,
    naming: connector_http::mcp::Naming,
) -> Result<(), StartError> {
    serve_stdio(async move {
        let local = local::Local::open(config, &agent, naming).await?;
        Ok(Bridge::local(local))
    })
}

/// Runs the bridge `open` makes on one thread: stdin, the transport and (locally) the
/// host share its event loop, so a message costs no hand-over between threads.
fn serve_stdio(
    open: impl std::future::Future<Output = Result<Bridge, StartError>>,
) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    runtime.block_on(async move {
        let bridge = Arc::new(open.await?);
        let lines = Lines::open()?;
        bridge.serve(lines).await;
        Ok(())
    })
}

/// Lines of stdin. A pipe or socket is read on the event loop itself (non-blocking, so a
/// message costs no hand-over between threads); anything else (a file, a terminal) by a
/// blocking reader thread.
enum Lines {
    #[cfg(unix)]
    Polled(PolledStdin),
    Thread(tokio::sync::mpsc::UnboundedReceiver<Bytes>),
}

impl Lines {
    fn open() -> Result<Lines, StartError> {
        #[cfg(unix)]
        if let Some(polled) = PolledStdin::open() {
            return Ok(Lines::Polled(polled));
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("mcp-stdin".into())
            .spawn(move || {
                let mut stdin = std::io::stdin().lock();
                loop {
                    let mut line = Vec::new();
                    match stdin.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if tx.send(Bytes::from(line)).is_err() {
                                break;
                            }
                        }
                    }
                }
            })
            .map_err(StartError::StdinReader)?;
        Ok(Lines::Thread(rx))
    }

    async fn next(&mut self) -> Option<Bytes> {
        match self {
            #[cfg(unix)]
            Lines::Polled(p) => p.next().await,
            Lines::Thread(rx) => rx.recv().await,
        }
    }
}

/// A non-blocking stdin pipe on the event loop; restores the descriptor's flags on drop.
#[cfg(unix)]
struct PolledStdin {
    fd: tokio::io::unix::AsyncFd<std::io::Stdin>,
    flags: rustix::fs::OFlags,
    buffer: Vec<u8>,
    /// What one read fills, allocated once: a fresh zeroed array per read would clear
    /// 64 KiB (and the cache with it) for every message.
    chunk: Box<[u8]>,
    eof: bool,
}

#[cfg(unix)]
impl PolledStdin {
    fn open() -> Option<PolledStdin> {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, fstat, FileType, OFlags};
        let stdin = std::io::stdin();
        let kind = FileType::from_raw_mode(fstat(&stdin).ok()?.st_mode);
        if !matches!(kind, FileType::Fifo | FileType::Socket) {
            return None;
        }
        let flags = fcntl_getfl(&stdin).ok()?;
        fcntl_setfl(&stdin, flags | OFlags::NONBLOCK).ok()?;
        // SAFETY: `Stdin` always yields fd 0, which nothing in this process closes or
        // replaces while the bridge runs (std never closes it), so the descriptor stays
        // valid and the same for the whole life of the `AsyncFd`.
        let registered = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(stdin, tokio::io::Interest::READABLE)
        };
        match registered {
            Ok(fd) => Some(PolledStdin {
                fd,
                flags,
                buffer: Vec::with_capacity(64 * 1024),
                chunk: vec![0u8; 64 * 1024].into_boxed_slice(),
                eof: false,
            }),
            Err(_) => {
                let _ = fcntl_setfl(std::io::stdin(), flags);
                None
            }
        }
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                return Some(Bytes::from(self.buffer.drain(..=end).collect::<Vec<u8>>()));
            }
            if self.eof {
                return (!self.buffer.is_empty())
                    .then(|| Bytes::from(std::mem::take(&mut self.buffer)));
            }
            let PolledStdin {
                fd,
                chunk,
                buffer,
                eof,
                ..
            } = self;
            let Ok(mut ready) = fd.readable().await else {
                *eof = true;
                continue;
            };
            match ready.try_io(|fd| {
                rustix::io::read(fd.get_ref(), &mut chunk[..]).map_err(std::io::Error::from)
            }) {
                Ok(Ok(0)) | Ok(Err(_)) => *eof = true,
                Ok(Ok(n)) => {
                    buffer.extend_from_slice(&chunk[..n]);
                    if n < chunk.len() {
                        // A short read drained the pipe: wait for the next write instead
                        // of asking again only to hear EAGAIN.
                        ready.clear_ready();
                    }
                }
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(unix)]
impl Drop for PolledStdin {
    fn drop(&mut self) {
        let _ = rustix::fs::fcntl_setfl(self.fd.get_ref(), self.flags);
    }
}

#[derive(Default)]
struct SessionState {
    id: Option<HeaderValue>,
    version: Option<HeaderValue>,
    /// The client's `initialize` request, replayed when the host forgets the session.
    initialize: Option<Value>,
    /// Bumped whenever the session changes.
    generation: u64,
}

/// Where the messages go.
enum Transport {
    /// A running host over HTTP.
    Remote {
        http: reqwest::Client,
        /// Keep-alive connections for `http://` endpoints (the hot path); `https://`
        /// goes through `http`.
        plain: Option<Plain>,
        endpoint: Url,
    },
    /// The endpoint served in this process.
    Local(Box<local::Local>),
}

struct Bridge {
    transport: Transport,
    auth: Option<HeaderValue>,
    state: Mutex<SessionState>,
    reinitialize: tokio::sync::Mutex<()>,
    /// Stateless requests in flight by id (JSON text): a `notifications/cancelled` naming
    /// one closes its HTTP request, which is how 2026-07-28 cancels (and ends a
    /// `subscriptions/listen`).
    stateless: Mutex<std::collections::HashMap<String, InFlight>>,
    /// Numbers the stateless requests, so a finished one never removes the entry of a
    /// later request that reused its id.
    next_stateless: std::sync::atomic::AtomicU64,
    /// Per tool: the arguments its input schema marks `x-mcp-header` (path, header name
    /// part), learnt from the stateless `tools/list` answers relayed, or fetched when the
    /// host refuses a call for a missing `Mcp-Param-*` header.
    mirrored: Mutex<std::collections::HashMap<String, Arc<[MirroredParam]>>>,
}

/// A stateless request in flight.
struct InFlight {
    seq: u64,
    /// A `subscriptions/listen`: it lasts until cancelled, so end of input cancels it.
    listen: bool,
    task: tokio::task::AbortHandle,
}

/// An argument mirrored into a header: its property path and `Mcp-Param-{name}`'s name.
type MirroredParam = (Vec<String>, String);

/// A header value as 2026-07-28 carries names: as is when it is plain visible ASCII,
/// else (or when it looks like the sentinel itself) `=?base64?…?=`.
fn header_name_value(name: &str) -> Option<HeaderValue> {
    let sentinel = name.starts_with("=?base64?") && name.ends_with("?=");
    let plain = !name.is_empty()
        && name.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !name.starts_with(' ')
        && !name.ends_with(' ')
        && !sentinel;
    if plain {
        return HeaderValue::from_str(name).ok();
    }
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(name.as_bytes());
    HeaderValue::from_str(&format!("=?base64?{encoded}?=")).ok()
}

/// What a line holds.
enum Kind {
    Initialize,
    /// A request of a session revision (answered), or a batch.
    Request(Option<Value>),
    /// A request of the stateless revision: sent without a session, with the headers its
    /// body names.
    Stateless(Value, StatelessHeaders),
    /// A notification cancelling request `requestId` (the value).
    Cancel(Value),
    /// A notification or a client response (not answered).
    Other,
}

/// The headers a stateless request mirrors from its body.
struct StatelessHeaders {
    version: String,
    method: String,
    /// `params.name` (or `params.uri`), for the methods that name something.
    name: Option<String>,
}

type Text<'a> = Option<std::borrow::Cow<'a, str>>;

/// The fields the bridge looks at; everything else in a message is skipped, not built.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default, borrow)]
    method: Text<'a>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default, borrow)]
    params: Option<PeekParams<'a>>,
}

#[derive(serde::Deserialize)]
struct PeekParams<'a> {
    /// A value, not text: a `name` of another type must not cost the message its `_meta`.
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    uri: Option<Value>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
    #[serde(default, borrow, rename = "_meta")]
    meta: Option<PeekMeta<'a>>,
}

#[derive(serde::Deserialize)]
struct PeekMeta<'a> {
    #[serde(default, borrow, rename = "io.modelcontextprotocol/protocolVersion")]
    version: Text<'a>,
}

/// Without `params` (for messages whose `params` is not an object: the host answers those).
#[derive(serde::Deserialize)]
struct PeekPlain<'a> {
    #[serde(default, borrow)]
    method: Text<'a>,
    #[serde(default)]
    id: Option<Value>,
}

/// Classifies a line (one JSON value); `Err` is the parse error.
fn kind_of(line: &[u8]) -> Result<Kind, serde_json::Error> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        let peek: Peek<'_> = match serde_json::from_slice(line) {
            Ok(peek) => peek,
            Err(_) => {
                let plain: PeekPlain<'_> = serde_json::from_slice(line)?;
                Peek {
                    method: plain.method,
                    id: plain.id,
                    params: None,
                }
            }
        };
        let params = peek.params.as_ref();
        let version = params
            .and_then(|p| p.meta.as_ref())
            .and_then(|m| m.version.as_deref());
        return Ok(match (peek.method.as_deref(), peek.id, version) {
            // Before `initialize`: at a revision named in `_meta`, `initialize` is
            // answered by the host (`404`), not opened as a session.
            (Some(method), Some(id), Some(version)) => Kind::Stateless(
                id,
                StatelessHeaders {
                    version: version.to_string(),
                    method: method.to_string(),
                    name: params
                        .and_then(|p| {
                            p.name
                                .as_ref()
                                .and_then(Value::as_str)
                                .or(p.uri.as_ref().and_then(Value::as_str))
                        })
                        .filter(|_| {
                            matches!(method, "tools/call" | "prompts/get" | "resources/read")
                        })
                        .map(str::to_string),
                },
            ),
            (Some("initialize"), Some(_), None) => Kind::Initialize,
            (Some(_), Some(id), None) => Kind::Request(Some(id)),
            (Some("notifications/cancelled"), None, _) => {
                match params.and_then(|p| p.request_id.clone()) {
                    Some(id) => Kind::Cancel(id),
                    None => Kind::Other,
                }
            }
            _ => Kind::Other,
        });
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(line)?;
    Ok(if first == Some(&b'[') {
        Kind::Request(None)
    } else {
        Kind::Other
    })
}

/// Writes one JSON-RPC message as one stdout line. A closed stdout means the client is
/// gone: exit.
fn emit(json: &[u8]) {
    let mut line = if json.contains(&b'\n') || json.contains(&b'\r') {
        // SSE data may span lines; a stdout message may not.
        match serde_json::from_slice::<Value>(json) {
            Ok(v) => v.to_string().into_bytes(),
            Err(_) => return,
        }
    } else {
        json.to_vec()
    };
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    if out.write_all(&line).and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

fn emit_error(id: &Value, code: i64, message: &str) {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    emit(error.to_string().as_bytes());
}

impl Bridge {
    fn remote(config: BridgeConfig) -> Result<Self, StartError> {
        let auth = match config.token {
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| StartError::TokenNotAHeader)?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!(
                "connector-host-mcp-bridge/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(StartError::HttpClient)?;
        let plain = (config.endpoint.scheme() == "http")
            .then(|| Plain::new(&config.endpoint))
            .flatten();
        Ok(Bridge::with(
            Transport::Remote {
                http,
                plain,
                endpoint: config.endpoint,
            },
            auth,
        ))
    }

    /// The endpoint in this process (it authenticates each message itself).
    fn local(local: local::Local) -> Self {
        Bridge::with(Transport::Local(Box::new(local)), None)
    }

    fn with(transport: Transport, auth: Option<HeaderValue>) -> Self {
        Bridge {
            transport,
            auth,
            state: Mutex::new(SessionState::default()),
            reinitialize: tokio::sync::Mutex::new(()),
            stateless: Mutex::new(std::collections::HashMap::new()),
            next_stateless: std::sync::atomic::AtomicU64::new(0),
            mirrored: Mutex::new(std::collections::HashMap::new()),
        }
    }

    async fn serve(self: Arc<Self>, mut lines: Lines) {
        let mut in_flight = tokio::task::JoinSet::new();
        while let Some(line) = lines.next().await {
            while in_flight.try_join_next().is_some() {}
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let kind = match kind_of(&line) {
                Ok(kind) => kind,
                Err(e) => {
                    emit_error(&Value::Null, PARSE_ERROR, &format!("Parse error: {e}"));
                    continue;
                }
            };
            match kind {
                Kind::Initialize => match serde_json::from_slice(&line) {
                    Ok(message) => self.initialize(line, message).await,
                    Err(e) => emit_error(&Value::Null, PARSE_ERROR, &format!("Parse error: {e}")),
                },
                Kind::Request(id) => {
                    in_flight.spawn(self.clone().forward(line, id));
                }
                Kind::Stateless(id, headers) => {
                    let key = id.to_string();
                    let seq = self
                        .next_stateless
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let listen = headers.method == "subscriptions/listen";
                    // Registered under the lock the task's own removal takes, so that
                    // removal always finds this entry (or a later one it leaves alone).
                    let mut table = self.stateless.lock();
                    let task =
                        in_flight.spawn(self.clone().forward_stateless(line, id, headers, seq));
                    table.insert(key, InFlight { seq, listen, task });
                }
                Kind::Cancel(id) => {
                    let stateless = self.stateless.lock().remove(&id.to_string());
                    match stateless {
                        // Closing the request is the cancellation; nothing is sent.
                        Some(request) => request.task.abort(),
                        None => self.clone().forward(line, None).await,
                    }
                }
                Kind::Other => self.clone().forward(line, None).await,
            }
        }
        // Subscriptions last until cancelled: the input is over, so they are. Other
        // requests get their answers (within the wait below).
        self.stateless.lock().retain(|_, request| {
            if request.listen {
                request.task.abort();
            }
            !request.listen
        });
        let drain = async { while in_flight.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
        self.end_session().await;
    }

    fn headers(&self, state: &SessionState) -> HeaderMap {
        let mut h = HeaderMap::with_capacity(5);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(ACCEPT, HeaderValue::from_static(client::ACCEPT));
        if let Some(auth) = &self.auth {
            h.insert(AUTHORIZATION, auth.clone());
        }
        if let Some(id) = &state.id {
            h.insert(SESSION_HEADER, id.clone());
        }
        if let Some(v) = &state.version {
            h.insert(VERSION_HEADER, v.clone());
        }
        h
    }

    async fn post(&self, body: Bytes, headers: HeaderMap) -> Result<Answer, SendError> {
        self.send(reqwest::Method::POST, body, headers).await
    }

    /// One request to the endpoint (a POST, the GET stream, the DELETE).
    async fn send(
        &self,
        method: reqwest::Method,
        body: Bytes,
        headers: HeaderMap,
    ) -> Result<Answer, SendError> {
        match &self.transport {
            Transport::Local(local) => Ok(Answer::Local(local.send(method, headers, body).await)),
            Transport::Remote {
                plain: Some(plain), ..
            } if method == reqwest::Method::POST => plain.post(body, headers).await,
            Transport::Remote { http, endpoint, .. } => {
                let post = method == reqwest::Method::POST;
                let mut request = http.request(method, endpoint.clone()).headers(headers);
                if post {
                    request = request.body(body);
                }
                request
                    .send()
                    .await
                    .map(Answer::Reqwest)
                    .map_err(SendError::Reqwest)
            }
        }
    }

    fn unreachable(&self, e: &SendError) -> String {
        let e = connector_remote_answer::error_chain(e);
        match &self.transport {
            Transport::Remote { endpoint, .. } => {
                format!("connector-host bridge: the request to {endpoint} failed: {e}")
            }
            Transport::Local(local) => format!(
                "connector-host mcp: the request to agent `{}` failed: {e}",
                local.agent()
            ),
        }
    }

    /// `initialize`: a new session (any previous one is forgotten), then its GET stream.
    async fn initialize(self: &Arc<Self>, line: Bytes, message: Value) {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let headers = {
            let mut state = self.state.lock();
            *state = SessionState {
                initialize: Some(message),
                generation: state.generation + 1,
                ..SessionState::default()
            };
            self.headers(&state)
        };
        match self.post(line, headers).await {
            Ok(response) => {
                if let Some(generation) = self.adopt_session(&response) {
                    let answer = self.answer(response, Some(&id)).await;
                    self.adopt_version(answer.as_deref());
                    if let Some(answer) = answer {
                        emit(&answer);
                    }
                    tokio::spawn(self.clone().listen(generation));
                } else {
                    self.relay(response, Some(&id)).await;
                }
            }
            Err(e) => emit_error(&id, INTERNAL_ERROR, &self.unreachable(&e)),
        }
    }

    /// Takes the session id of a successful `initialize` answer; returns the new generation.
    fn adopt_session(&self, response: &Answer) -> Option<u64> {
        if !response.status().is_success() {
            return None;
        }
        let mut state = self.state.lock();
        state.id = response.headers().get(SESSION_HEADER).cloned();
        state.generation += 1;
        Some(state.generation)
    }

    fn adopt_version(&self, answer: Option<&[u8]>) {
        let version = answer
            .and_then(|a| serde_json::from_slice::<Value>(a).ok())
            .and_then(|v| {
                v.pointer("/result/protocolVersion")
                    .and_then(Value::as_str)
                    .and_then(|s| HeaderValue::from_str(s).ok())
            });
        self.state.lock().version = version;
    }

    /// Forwards one message (retrying once through a replayed `initialize` when the
    /// host no longer knows the session) and relays the answer.
    async fn forward(self: Arc<Self>, line: Bytes, id: Option<Value>) {
        for attempt in 0..2 {
            let (headers, generation, had_session) = {
                let state = self.state.lock();
                (
                    self.headers(&state),
                    state.generation,
                    state.id.is_some() && state.initialize.is_some(),
                )
            };
            match self.post(line.clone(), headers).await {
                Ok(r) if r.status() == StatusCode::NOT_FOUND && had_session && attempt == 0 => {
                    if !self.reinitialize(generation).await {
                        self.relay(r, id.as_ref()).await;
                        return;
                    }
                }
                Ok(r) => {
                    self.relay(r, id.as_ref()).await;
                    return;
                }
                Err(e) => {
                    let message = self.unreachable(&e);
                    match &id {
                        Some(id) => emit_error(id, INTERNAL_ERROR, &message),
                        None => eprintln!("{message}"),
                    }
                    return;
                }
            }
        }
    }

    /// Forwards one stateless request: no session, `MCP-Protocol-Version`, `Mcp-Method`
    /// and `Mcp-Name` from its body, and for `tools/call` the `Mcp-Param-*` headers of
    /// the arguments the tool's schema marks `x-mcp-header` (when the host refuses a call
    /// for a missing one, the bridge lists the tools once and retries, as the revision
    /// tells clients to). Relays every message of the answer (a `subscriptions/listen`
    /// answer is a stream of them, until its final result).
    async fn forward_stateless(
        self: Arc<Self>,
        line: Bytes,
        id: Value,
        sent: StatelessHeaders,
        seq: u64,
    ) {
        let mut headers = self.headers(&SessionState::default());
        let values = [
            (VERSION_HEADER, HeaderValue::from_str(&sent.version).ok()),
            (
                connector_http::mcp::stateless::METHOD_HEADER,
                HeaderValue::from_str(&sent.method).ok(),
            ),
            (
                connector_http::mcp::stateless::NAME_HEADER,
                sent.name.as_deref().and_then(header_name_value),
            ),
        ];
        for (name, value) in values {
            if let Some(value) = value {
                headers.insert(name, value);
            }
        }
        let tool = sent.name.as_deref().filter(|_| sent.method == "tools/call");
        for attempt in 0..2 {
            let mut with_params = headers.clone();
            if let Some(tool) = tool {
                self.mirror_params(tool, &line, &mut with_params);
            }
            let response = match self.post(line.clone(), with_params).await {
                Ok(r) => r,
                Err(e) => {
                    emit_error(&id, INTERNAL_ERROR, &self.unreachable(&e));
                    break;
                }
            };
            if tool.is_some() && attempt == 0 && response.status() == StatusCode::BAD_REQUEST {
                let Ok(body) = response.bytes().await else {
                    emit_error(&id, INTERNAL_ERROR, TOO_LARGE);
                    break;
                };
                let code = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v.pointer("/error/code").and_then(Value::as_i64));
                if code == Some(HEADER_MISMATCH) && self.learn_tools(&sent.version).await {
                    continue;
                }
                match serde_json::from_slice::<Value>(&body) {
                    Ok(v) if v.get("jsonrpc").is_some() => emit(&body),
                    _ => emit_error(&id, INTERNAL_ERROR, "the host answered HTTP 400"),
                }
                break;
            }
            if sent.method == "tools/list" {
                if let Some(answer) = self.answer(response, Some(&id)).await {
                    self.remember_tools(&answer);
                    emit(&answer);
                }
            } else {
                self.relay(response, Some(&id)).await;
            }
            break;
        }
        let key = id.to_string();
        let mut table = self.stateless.lock();
        if table.get(&key).is_some_and(|request| request.seq == seq) {
            table.remove(&key);
        }
    }

    /// Records which arguments each tool of a `tools/list` answer mirrors into headers.
    fn remember_tools(&self, answer: &[u8]) {
        let Ok(answer) = serde_json::from_slice::<Value>(answer) else {
            return;
        };
        let Some(tools) = answer.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        // A complete list replaces what was known (tools that left are forgotten); a
        // page adds to it.
        let complete = answer
            .pointer("/result/nextCursor")
            .is_none_or(Value::is_null);
        let mut mirrored = self.mirrored.lock();
        if complete {
            mirrored.clear();
        }
        for tool in tools {
            let (Some(name), Some(schema)) = (tool["name"].as_str(), tool.get("inputSchema"))
            else {
                continue;
            };
            let mut marked = Vec::new();
            connector_http::mcp::stateless::mirrored_params(schema, &mut Vec::new(), &mut marked);
            mirrored.insert(name.to_string(), marked.into());
        }
    }

    /// Lists the tools at `version` for [`Bridge::remember_tools`]; whether it could.
    async fn learn_tools(&self, version: &str) -> bool {
        let request = json!({
            "jsonrpc": "2.0",
            "id": "connector-host-bridge-tools",
            "method": "tools/list",
            "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {},
            }},
        });
        let mut headers = self.headers(&SessionState::default());
        let (Ok(v), m) = (
            HeaderValue::from_str(version),
            HeaderValue::from_static("tools/list"),
        ) else {
            return false;
        };
        headers.insert(VERSION_HEADER, v);
        headers.insert(connector_http::mcp::stateless::METHOD_HEADER, m);
        match self.post(Bytes::from(request.to_string()), headers).await {
            Ok(r) if r.status().is_success() => match r.bytes().await {
                Ok(answer) => {
                    self.remember_tools(&answer);
                    true
                }
                Err(TooLarge) => false,
            },
            _ => false,
        }
    }

    /// Adds `Mcp-Param-*` for each argument of `tool` its schema marks `x-mcp-header`.
    fn mirror_params(&self, tool: &str, line: &[u8], headers: &mut HeaderMap) {
        let marked = self.mirrored.lock().get(tool).cloned();
        let Some(marked) = marked.filter(|m| !m.is_empty()) else {
            return;
        };
        let Ok(message) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let arguments = message.pointer("/params/arguments");
        for (path, name) in marked.iter() {
            let text = match connector_http::mcp::stateless::argument_at(arguments, path) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            let header =
                reqwest::header::HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes());
            if let (Ok(header), Some(value)) = (header, header_name_value(&text)) {
                headers.insert(header, value);
            }
        }
    }

    /// Replays the client's `initialize` (unless another task already did since
    /// `seen_generation`). Returns whether a session is now open.
    async fn reinitialize(self: &Arc<Self>, seen_generation: u64) -> bool {
        let _one_at_a_time = self.reinitialize.lock().await;
        let (init, headers) = {
            let mut state = self.state.lock();
            if state.generation != seen_generation {
                return state.id.is_some();
            }
            let Some(mut init) = state.initialize.clone() else {
                return false;
            };
            init["id"] = json!("connector-host-bridge-reinitialize");
            state.id = None;
            state.version = None;
            (init, self.headers(&state))
        };
        let Ok(response) = self.post(Bytes::from(init.to_string()), headers).await else {
            return false;
        };
        let Some(generation) = self.adopt_session(&response) else {
            return false;
        };
        let answer = response.bytes().await.ok();
        self.adopt_version(answer.as_deref());
        let initialized =
            Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        let headers = self.headers(&self.state.lock());
        let _ = self.post(initialized, headers).await;
        eprintln!("connector-host bridge: the host had ended the MCP session; started a new one");
        tokio::spawn(self.clone().listen(generation));
        true
    }

    /// The JSON-RPC answer in a response, if any (the first message of an SSE answer).
    async fn answer(&self, response: Answer, id: Option<&Value>) -> Option<Vec<u8>> {
        let mut answers = Vec::new();
        self.collect(response, id, &mut |a| answers.push(a.to_vec()))
            .await;
        let mut answers = answers.into_iter();
        let first = answers.next();
        for more in answers {
            emit(&more);
        }
        first
    }

    /// Writes the answers in `response` to stdout.
    async fn relay(&self, response: Answer, id: Option<&Value>) {
        self.collect(response, id, &mut |a| emit(a)).await;
    }

    /// Calls `sink` with each JSON-RPC message `response` carries; an answer without one
    /// to a request becomes a JSON-RPC error with its id.
    async fn collect(
        &self,
        mut response: Answer,
        id: Option<&Value>,
        sink: &mut (dyn FnMut(&[u8]) + Send),
    ) {
        let status = response.status();
        let kind = BodyKind::of(
            response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        );
        if kind == BodyKind::EventStream {
            let mut parser = EventStreamDecoder::new(MAX_ANSWER_BYTES);
            let mut answered = false;
            while let Some(chunk) = response.chunk().await {
                for event in parser.feed(&chunk) {
                    answered |= client::is_answer(&event);
                    sink(&event);
                }
                if answered {
                    return;
                }
                if parser.overflowed() {
                    if let Some(id) = id {
                        emit_error(id, INTERNAL_ERROR, TOO_LARGE);
                    }
                    return;
                }
            }
            if let (Some(id), false) = (id, answered) {
                emit_error(
                    id,
                    INTERNAL_ERROR,
                    "the host's answer stream ended without an answer",
                );
            }
            return;
        }
        let is_json = kind == BodyKind::Json;
        let Ok(body) = response.bytes().await else {
            match id {
                Some(id) => emit_error(id, INTERNAL_ERROR, TOO_LARGE),
                None => eprintln!("connector-host bridge: {TOO_LARGE}"),
            }
            return;
        };
        if status.is_success() && is_json && !body.is_empty() {
            // The answer as the host wrote it (`emit` keeps it on one line).
            sink(&body);
            return;
        }
        if status == StatusCode::ACCEPTED && body.is_empty() {
            if let Some(id) = id {
                emit_error(
                    id,
                    INTERNAL_ERROR,
                    "the host accepted the request without answering it",
                );
            }
            return;
        }
        match serde_json::from_slice::<Value>(&body) {
            // An error without an id (rejected before the id was read): give it the id.
            Ok(mut v) if v.get("error").is_some() && v.get("id") == Some(&Value::Null) => {
                if let Some(id) = id {
                    v["id"] = id.clone();
                }
                sink(v.to_string().as_bytes());
            }
            Ok(v) if v.get("jsonrpc").is_some() || v.is_array() => sink(&body),
            _ => {
                let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
                let message = format!("the host answered HTTP {status}: {text}");
                match id {
                    Some(id) => emit_error(id, INTERNAL_ERROR, &message),
                    None if !status.is_success() => eprintln!("connector-host bridge: {message}"),
                    None => {}
                }
            }
        }
    }

    /// Relays the session's GET stream to stdout while the session lasts.
    async fn listen(self: Arc<Self>, generation: u64) {
        let mut delay = Duration::from_millis(250);
        let mut last_event_id: Option<String> = None;
        loop {
            let mut headers = {
                let state = self.state.lock();
                if state.generation != generation || state.id.is_none() {
                    return;
                }
                self.headers(&state)
            };
            headers.remove(CONTENT_TYPE);
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
            if let Some(id) = last_event_id
                .as_deref()
                .and_then(|i| HeaderValue::from_str(i).ok())
            {
                headers.insert("last-event-id", id);
            }
            match self.send(reqwest::Method::GET, Bytes::new(), headers).await {
                Ok(mut response) if response.status().is_success() => {
                    delay = Duration::from_millis(250);
                    let mut parser = EventStreamDecoder::new(MAX_ANSWER_BYTES);
                    while let Some(chunk) = response.chunk().await {
                        for event in parser.feed(&chunk) {
                            emit(&event);
                        }
                        if let Some(id) = parser.take_last_event_id() {
                            last_event_id = Some(id);
                        }
                        if parser.overflowed() {
                            eprintln!(
                                "connector-host bridge: the notification stream: {TOO_LARGE}"
                            );
                            break;
                        }
                    }
                }
                // No stream offered, or the session is gone (a replayed `initialize`
                // starts a new listener), or the token is refused: stop.
                Ok(response)
                    if matches!(
                        response.status(),
                        StatusCode::METHOD_NOT_ALLOWED
                            | StatusCode::NOT_FOUND
                            | StatusCode::UNAUTHORIZED
                            | StatusCode::FORBIDDEN
                    ) =>
                {
                    if !matches!(
                        response.status(),
                        StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_FOUND
                    ) {
                        eprintln!(
                            "connector-host bridge: the host refused the notification stream ({})",
                            response.status()
                        );
                    }
                    return;
                }
                Ok(_) | Err(_) => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    async fn end_session(&self) {
        let headers = {
            let state = self.state.lock();
            if state.id.is_none() {
                return;
            }
            self.headers(&state)
        };
        let delete = self.send(reqwest::Method::DELETE, Bytes::new(), headers);
        let _ = tokio::time::timeout(Duration::from_secs(2), delete).await;
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// HTTP/1.1 keep-alive connections to an `http://` endpoint, straight on hyper: the
/// bridge's hot path costs one write and one read per message, nothing more.
struct Plain {
    /// `host:port` to connect to.
    authority: String,
    host: HeaderValue,
    path: String,
    idle: Arc<Mutex<Vec<Sender>>>,
}

impl Plain {
    fn new(url: &Url) -> Option<Plain> {
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        };
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        Some(Plain {
            authority: format!("{host}:{port}"),
            host: HeaderValue::from_str(&host_header).ok()?,
            path,
            idle: Arc::new(Mutex::new(Vec::new())),
        })
    }

    async fn connect(&self) -> Result<Sender, SendError> {
        let stream = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(&self.authority),
        )
        .await
        .map_err(|_| SendError::ConnectTimeout(self.authority.clone()))?
        .map_err(|source| SendError::Connect {
            authority: self.authority.clone(),
            source,
        })?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(SendError::Hyper)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    async fn post(&self, body: Bytes, mut headers: HeaderMap) -> Result<Answer, SendError> {
        headers.insert(HOST, self.host.clone());
        let mut request = hyper::Request::post(self.path.as_str())
            .body(Full::new(body))
            .map_err(SendError::Request)?;
        *request.headers_mut() = headers;
        loop {
            let pooled = loop {
                match self.idle.lock().pop() {
                    Some(s) if s.is_closed() => continue,
                    other => break other,
                }
            };
            let fresh = pooled.is_none();
            let mut sender = match pooled {
                Some(s) => s,
                None => self.connect().await?,
            };
            if let Err(e) = sender.ready().await {
                if fresh {
                    return Err(SendError::Hyper(e));
                }
                continue;
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    return Ok(Answer::Plain {
                        status: parts.status,
                        headers: parts.headers,
                        body,
                        conn: Some((sender, self.idle.clone())),
                    });
                }
                // A pooled connection the host had closed: the request was never
                // sent, so it is safe to send it again on a fresh one.
                Err(mut e) => match e.take_message() {
                    Some(unsent) if !fresh => request = unsent,
                    _ => return Err(SendError::Hyper(e.into_error())),
                },
            }
        }
    }
}

/// An HTTP answer from any transport.
enum Answer {
    Reqwest(reqwest::Response),
    /// From the endpoint in this process.
    Local(axum::response::Response),
    Plain {
        status: StatusCode,
        headers: HeaderMap,
        body: hyper::body::Incoming,
        /// Goes back to the pool once the body is read to its end.
        conn: Option<(Sender, Arc<Mutex<Vec<Sender>>>)>,
    },
}

impl Answer {
    fn status(&self) -> StatusCode {
        match self {
            Answer::Reqwest(r) => r.status(),
            Answer::Local(r) => r.status(),
            Answer::Plain { status, .. } => *status,
        }
    }

    fn headers(&self) -> &HeaderMap {
        match self {
            Answer::Reqwest(r) => r.headers(),
            Answer::Local(r) => r.headers(),
            Answer::Plain { headers, .. } => headers,
        }
    }

    /// The next piece of the body; `None` at its end (or on an error).
    async fn chunk(&mut self) -> Option<Bytes> {
        match self {
            Answer::Reqwest(r) => r.chunk().await.ok().flatten(),
            Answer::Local(r) => loop {
                match r.body_mut().frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(data);
                        }
                    }
                    Some(Err(_)) | None => return None,
                }
            },
            Answer::Plain { body, conn, .. } => loop {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(data);
                        }
                    }
                    Some(Err(_)) => {
                        conn.take();
                        return None;
                    }
                    None => {
                        if let Some((sender, pool)) = conn.take() {
                            pool.lock().push(sender);
                        }
                        return None;
                    }
                }
            },
        }
    }

    /// The whole body, unless it is larger than [`MAX_ANSWER_BYTES`] (then the rest is
    /// not read, and the connection is not reused).
    async fn bytes(mut self) -> Result<Vec<u8>, TooLarge> {
        let mut all = Vec::new();
        while let Some(chunk) = self.chunk().await {
            if all.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(TooLarge);
            }
            all.extend_from_slice(&chunk);
        }
        Ok(all)
    }
}

/// The largest answer, or event of an answer stream, the bridge reads: far above a tool
/// result at the host's output limits, and a bound on what a server at the endpoint that
/// streams without end can make this process hold.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// What a client is told of an answer past [`MAX_ANSWER_BYTES`].
const TOO_LARGE: &str = "the host's answer is larger than the 64 MiB the bridge reads";

/// An answer, or an event of an answer stream, past [`MAX_ANSWER_BYTES`].
#[derive(Debug)]
struct TooLarge;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let kind = |s: &str| kind_of(s.as_bytes());
        assert!(matches!(
            kind(r#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}"#),
            Ok(Kind::Initialize)
        ));
        assert!(matches!(
            kind(r#" {"jsonrpc": "2.0", "id": "a", "method": "tools/list"}"#),
            Ok(Kind::Request(Some(Value::String(_))))
        ));
        assert!(matches!(
            kind(r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#),
            Ok(Kind::Other)
        ));
        assert!(matches!(kind("[1, 2]"), Ok(Kind::Request(None))));
        assert!(matches!(kind("17"), Ok(Kind::Other)));
        assert!(kind("{nope").is_err());
        assert!(kind(r#"{"method": "a\u00e9"} trailing"#).is_err());
    }
}
