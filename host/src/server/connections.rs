//! Serving HTTP/1 connections with bounds on every client: how long it may take to send a
//! request's headers, how long a keep-alive connection may sit idle, how long a request
//! body may stop arriving, and how many connections are served at once.
//!
//! `axum::serve` has none of these: an idle socket, a half-sent header or a half-sent
//! body would hold a connection (and a file descriptor) forever, and enough of them stop
//! the host answering anyone. Each connection here is watched by its own task:
//!
//! - a connection must complete a request's headers within `header_timeout` of opening
//!   (or of its previous response, once bytes of the next request arrive), else it is
//!   dropped;
//! - a keep-alive connection with no request for `idle_timeout` is closed;
//! - a request body that makes no progress for `header_timeout` fails with
//!   [`BodyStalled`] (the handlers answer `408`); one a handler did not read (it answered
//!   first: `401`, `404`) is read and dropped after the answer, bounded;
//! - past `max_connections` (lowered to what the open-files limit leaves room for), a
//!   connection is answered `503` with the contract's JSON error and closed, without
//!   reading its request.
//!
//! Hyper's own `header_read_timeout` is not used: it also runs while a keep-alive
//! connection waits for its next request, which would close idle connections at the
//! header timeout rather than the idle timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::Router;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

use crate::config::ServerLimits;
use crate::http::{discard, BodyStalled};

/// File descriptors kept free for everything that is not a client connection: the
/// database, the component cache, guests' outbound HTTP, refusing connections.
const RESERVED_FILES: u64 = 128;
/// Refused connections that linger after their `503` at once.
const LINGERING_AT_ONCE: usize = 32;
/// How long a refused connection is read (and its bytes dropped) after its `503`, so a
/// client still sending reads the answer rather than a reset.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);

/// How many connections may be served at once under an open-files limit of `open_files`
/// (`None`: unknown): `wanted`, lowered to leave [`RESERVED_FILES`] descriptors free.
pub fn connection_cap(wanted: usize, open_files: Option<u64>) -> usize {
    match open_files {
        Some(limit) => {
            let room = limit.saturating_sub(RESERVED_FILES).max(1);
            wanted.min(usize::try_from(room).unwrap_or(usize::MAX))
        }
        None => wanted,
    }
}

/// Serves `router` on `listener` under `limits` until `stop` resolves; then stops
/// accepting, lets every connection finish its current request, and returns when the
/// last one has closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    stop: impl Future<Output = ()>,
) {
    let cap = connection_cap(limits.max_connections, open_files_limit());
    if cap < limits.max_connections {
        tracing::warn!(
            max_connections = limits.max_connections,
            serving = cap,
            "the open-files limit leaves room for fewer connections than server.max_connections; raise it (ulimit -n) to serve more"
        );
    }
    let connections = Arc::new(Semaphore::new(cap));
    let lingering = Arc::new(Lingering::default());
    let (stopping, stopped) = watch::channel(false);
    let mut accept_errors = AcceptErrors::default();
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_errors.pause(e).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        match connections.clone().try_acquire_owned() {
            Ok(permit) => {
                let router = router.clone();
                let stopped = stopped.clone();
                tokio::spawn(async move {
                    serve_connection(stream, router, limits, stopped).await;
                    drop(permit);
                });
            }
            Err(_) => refuse(stream, &lingering),
        }
    }
    let _ = stopping.send(true);
    // Every connection holds a permit until it closes.
    let _ = connections.acquire_many(cap as u32).await;
}

/// The soft open-files limit of this process, if it can be read.
fn open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Logs accept failures (at most once a second) and pauses after each: a full
/// descriptor table does not clear by retrying at once.
#[derive(Default)]
struct AcceptErrors {
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    async fn pause(&mut self, error: io::Error) {
        if self
            .last_logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(
                error = %error,
                repeated = self.unlogged,
                "cannot accept a connection; if this says `Too many open files`, lower server.max_connections or raise the open-files limit"
            );
            self.last_logged = Some(Instant::now());
            self.unlogged = 0;
        } else {
            self.unlogged += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Answers a connection past the cap with `503` and closes it, without reading its
/// request; the connection lingers (see [`Lingering`]) so a client whose request
/// arrives after the answer reads the answer rather than a reset.
fn refuse(stream: TcpStream, lingering: &Arc<Lingering>) {
    let (id, evicted) = lingering.enter();
    let lingering = lingering.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = answer_and_linger(stream) => {}
            () = evicted.notified() => {}
        }
        lingering.leave(id);
    });
}

/// The answer to a connection past the cap.
fn refusal() -> &'static str {
    static ANSWER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| {
        let body = serde_json::json!({"error": {
            "code": "host_busy",
            "message": "the server has as many connections as it serves at once (server.max_connections); retry shortly",
        }})
        .to_string();
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    })
}

/// Refused connections that are still read for a moment after their `503`, so a client
/// whose request arrives after the answer reads the answer rather than a reset. At most
/// [`LINGERING_AT_ONCE`] linger; a new one ends the oldest.
#[derive(Default)]
struct Lingering {
    /// The last id given out, and the lingering connections, oldest first.
    queue: std::sync::Mutex<(u64, LingeringQueue)>,
}

type LingeringQueue = std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>;

impl Lingering {
    fn enter(&self) -> (u64, Arc<tokio::sync::Notify>) {
        let mut guard = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (next, queue) = &mut *guard;
        if queue.len() >= LINGERING_AT_ONCE {
            if let Some((_, oldest)) = queue.pop_front() {
                oldest.notify_one();
            }
        }
        *next += 1;
        let notify = Arc::new(tokio::sync::Notify::new());
        queue.push_back((*next, notify.clone()));
        (*next, notify)
    }

    fn leave(&self, id: u64) {
        let mut guard = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        guard.1.retain(|(i, _)| *i != id);
    }
}

/// Writes the refusal, closes the sending side, then reads until the client closes (at
/// most [`REFUSAL_LINGER`] in all).
async fn answer_and_linger(mut stream: TcpStream) {
    let drain = async {
        stream.write_all(refusal().as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await? > 0 {}
        io::Result::Ok(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
}

/// What one connection has been doing, shared by its socket, its requests and its
/// watchdog. Times are milliseconds since the connection opened.
struct Activity {
    opened: Instant,
    /// Requests being answered (their response bodies not yet finished).
    busy: AtomicU32,
    /// When the first byte of a request whose headers are not complete arrived
    /// ([`NOT_WAITING`]: none is pending). A new connection waits from its opening.
    head_since: AtomicU64,
    /// The last read or write.
    last: AtomicU64,
}

const NOT_WAITING: u64 = u64::MAX;

/// What the watchdog does next.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Look again at this time since opening.
    WaitUntil(Duration),
    /// Headers took too long: drop the connection.
    Drop,
    /// Idle for too long: close it gracefully.
    Close,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            busy: AtomicU32::new(0),
            head_since: AtomicU64::new(0),
            last: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn read(&self, bytes: usize) {
        let now = self.now();
        self.last.store(now, Ordering::Relaxed);
        if bytes > 0 && self.busy.load(Ordering::Acquire) == 0 {
            let _ = self.head_since.compare_exchange(
                NOT_WAITING,
                now,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    fn wrote(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
    }

    fn request_started(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NOT_WAITING, Ordering::Release);
        Busy(self.clone())
    }

    fn verdict(&self, limits: &ServerLimits, now: u64) -> Verdict {
        let header = limits.header_timeout.as_millis() as u64;
        let idle = limits.idle_timeout.as_millis() as u64;
        if self.busy.load(Ordering::Acquire) > 0 {
            return Verdict::WaitUntil(Duration::from_millis(now + header.min(idle)));
        }
        let head_since = self.head_since.load(Ordering::Acquire);
        if head_since != NOT_WAITING {
            return if now >= head_since + header {
                Verdict::Drop
            } else {
                Verdict::WaitUntil(Duration::from_millis(head_since + header))
            };
        }
        let last = self.last.load(Ordering::Relaxed);
        if now >= last + idle {
            Verdict::Close
        } else {
            Verdict::WaitUntil(Duration::from_millis(last + idle))
        }
    }
}

/// Marks a request as being answered until its response body is done.
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.wrote();
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    limits: ServerLimits,
    mut stopped: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = activity.request_started();
            let router = router.clone();
            let stall = limits.header_timeout;
            async move {
                let request = request.map(|body| Body::new(StallBounded::new(body, stall)));
                let response = match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Body::new(UntilDone { body, _busy: busy })),
                )
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        let verdict = activity.verdict(&limits, activity.now());
        let wake = match verdict {
            Verdict::WaitUntil(at) => tokio::time::Instant::from_std(activity.opened + at),
            Verdict::Drop => return,
            Verdict::Close if !closing => {
                closing = true;
                connection.as_mut().graceful_shutdown();
                continue;
            }
            // Closing and still not done: the client gets header_timeout to finish.
            Verdict::Close => tokio::time::Instant::now() + limits.header_timeout,
        };
        tokio::select! {
            _ = connection.as_mut() => return,
            _ = tokio::time::sleep_until(wake) => {
                if closing && activity.busy.load(Ordering::Acquire) == 0 {
                    return;
                }
            }
            changed = stopped.changed(), if !closing => {
                if changed.is_err() || *stopped.borrow() {
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The socket of a connection, noting every read and write in its [`Activity`].
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            self.activity.read(buf.filled().len() - before);
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            if n > 0 {
                self.activity.wrote();
            }
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            if n > 0 {
                self.activity.wrote();
            }
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body that fails with [`BodyStalled`] when no part of it arrives for
/// `stall`. Dropped before its end (a handler that answered without reading it: a `401`,
/// a `404`), the rest is read and discarded in the background (bounded, see
/// [`discard`]), so the client reads the answer rather than a reset and the connection
/// stays usable.
struct StallBounded {
    inner: Option<Incoming>,
    stall: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl StallBounded {
    fn new(inner: Incoming, stall: Duration) -> Self {
        Self {
            inner: Some(inner),
            stall,
            timer: Box::pin(tokio::time::sleep(stall)),
        }
    }
}

impl Drop for StallBounded {
    fn drop(&mut self) {
        if let Some(rest) = self.inner.take().filter(|b| !b.is_end_stream()) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(discard(rest));
            }
        }
    }
}

impl http_body::Body for StallBounded {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let next = tokio::time::Instant::now() + this.stall;
                this.timer.as_mut().reset(next);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyStalled(this.stall))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its connection marked busy until it is done.
    struct UntilDone {
        #[pin]
        body: Body,
        _busy: Busy,
    }
}

impl http_body::Body for UntilDone {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ServerLimits {
        ServerLimits {
            header_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(1000),
            max_connections: 10,
        }
    }

    #[test]
    fn a_new_connection_must_send_its_headers_within_the_header_timeout() {
        let a = Activity::new();
        assert_eq!(
            a.verdict(&limits(), 50),
            Verdict::WaitUntil(Duration::from_millis(100))
        );
        assert_eq!(a.verdict(&limits(), 100), Verdict::Drop);
    }

    #[test]
    fn an_idle_keep_alive_connection_gets_the_idle_timeout() {
        let a = Arc::new(Activity::new());
        let busy = a.request_started();
        assert!(matches!(a.verdict(&limits(), 5000), Verdict::WaitUntil(_)));
        drop(busy);
        let last = a.last.load(Ordering::Relaxed);
        assert_eq!(
            a.verdict(&limits(), last + 500),
            Verdict::WaitUntil(Duration::from_millis(last + 1000))
        );
        assert_eq!(a.verdict(&limits(), last + 1000), Verdict::Close);
        // Bytes of a next request start its header clock.
        a.read(10);
        let since = a.head_since.load(Ordering::Relaxed);
        assert_ne!(since, NOT_WAITING);
        assert_eq!(a.verdict(&limits(), since + 100), Verdict::Drop);
    }

    #[test]
    fn the_refusal_is_the_contracts_json_error() {
        let (head, body) = refusal().split_once("\r\n\r\n").expect("head and body");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.parse().ok())
            .expect("content-length");
        assert_eq!(length, body.len());
        let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(json["error"]["code"], "host_busy");
    }

    #[tokio::test]
    async fn a_new_lingering_connection_ends_the_oldest() {
        let lingering = Lingering::default();
        let (first, evicted) = lingering.enter();
        for _ in 1..LINGERING_AT_ONCE {
            lingering.enter();
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(10), evicted.notified())
                .await
                .is_err(),
            "nobody is ended while there is room"
        );
        lingering.enter();
        tokio::time::timeout(Duration::from_secs(1), evicted.notified())
            .await
            .expect("the oldest is ended");
        lingering.leave(first);
        assert_eq!(lingering.queue.lock().unwrap().1.len(), LINGERING_AT_ONCE);
    }

    #[test]
    fn the_cap_leaves_room_under_the_open_files_limit() {
        assert_eq!(
            connection_cap(4096, Some(300)),
            300 - RESERVED_FILES as usize
        );
        assert_eq!(connection_cap(100, Some(65_536)), 100);
        assert_eq!(connection_cap(4096, None), 4096);
        assert_eq!(connection_cap(4096, Some(10)), 1);
    }
}
