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
//! - a connection whose client stops reading (its socket accepts nothing of an answer
//!   for `header_timeout`) is dropped, busy or not;
//! - a request body that makes no progress for `header_timeout`, or that past its first
//!   `header_timeout` averages less than 4 KiB/s, fails with [`BodyStalled`] (the
//!   handlers answer `408`, and the connection closes after it); one
//!   a handler did not read (it answered first: `401`, `404`) is read and dropped after
//!   the answer, bounded, with the connection still counted busy;
//! - each remote address ([`Peer`]) holds at most `max_connections_per_peer`
//!   connections, and all of them together at most `max_connections` (lowered to what
//!   the open-files limit leaves room for). At either bound a new connection does not
//!   wait for one to close: the least recently active idle connection (of that address,
//!   or of anyone at the total cap) is closed to make room ([`Slots`]), so sockets left
//!   idle, by one client or by many, never lock others out, and an address holding its
//!   whole share hurts only itself. Only when every one of them is busy answering a
//!   request is the new connection refused: answered `503` with the contract's JSON
//!   error and closed, its request unread, except `GET /healthz`, answered `200` there
//!   and then, so liveness is answered whenever the process runs.
//!
//! Hyper's own `header_read_timeout` is not used: it also runs while a keep-alive
//! connection waits for its next request, which would close idle connections at the
//! header timeout rather than the idle timeout.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::Router;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

use crate::{discard, BodyStalled, Peer};
use connector_core::config::ServerLimits;

/// The most a connection's read buffer holds: a request's head must fit (larger ones
/// are answered `431`).
const MAX_HEAD_BYTES: usize = 64 * 1024;
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
    let slots = Arc::new(Slots::new(cap, limits.per_peer(cap)));
    // Every connection's task holds a sender: `open.recv()` ends once all are gone.
    let (alive, mut open) = mpsc::channel::<()>(1);
    let lingering = Arc::new(Lingering::default());
    let (stopping, stopped) = watch::channel(false);
    let mut accept_errors = AcceptErrors::default();
    tokio::pin!(stop);
    loop {
        let (stream, remote) = tokio::select! {
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
        let peer = Peer::of(remote.ip());
        let activity = Arc::new(Activity::new());
        match slots.admit(peer, &activity) {
            Ok(slot) => {
                let router = router.clone();
                let stopped = stopped.clone();
                let alive = alive.clone();
                tokio::spawn(async move {
                    serve_connection(stream, peer, activity, router, limits, stopped).await;
                    drop(slot);
                    drop(alive);
                });
            }
            Err(refused) => refuse(stream, refused, &lingering),
        }
    }
    let _ = stopping.send(true);
    drop(alive);
    let _ = open.recv().await;
}

/// The connections being served, filed so that room is made fairly and cheaply: each
/// remote address holds at most `per_peer` of them and all together at most `cap`; at
/// either bound the least recently active idle connection (of that address, or of
/// anyone) is closed to make room for the new one.
///
/// A connection is not re-filed at every read or write (that would take this lock on
/// every request): it is filed under a stamp no later than its last activity, and a
/// search for the least recently active re-files an entry whose connection was active
/// since, and sets aside ("parks") one that is busy answering a request, to be filed
/// again when that request is done. So the first entry whose stamp is current is the
/// least recently active idle connection; each step is O(log n), and what one search
/// re-files or parks was paid for by activity since the last. The lock is never held
/// across an await.
struct Slots {
    cap: usize,
    per_peer: usize,
    /// Stamps are milliseconds since this.
    epoch: Instant,
    filed: parking_lot::Mutex<Filed>,
}

#[derive(Default)]
struct Filed {
    last_id: u64,
    open: HashMap<u64, Open>,
    /// Every connection not parked, by (stamp, id): the least recently active first.
    by_activity: BTreeSet<(u64, u64)>,
    peers: HashMap<Peer, PeerFiled>,
}

/// The connections of one remote address.
#[derive(Default)]
struct PeerFiled {
    open: usize,
    /// As [`Filed::by_activity`], this address's only.
    by_activity: BTreeSet<(u64, u64)>,
}

/// One connection being served.
struct Open {
    peer: Peer,
    /// When it opened (ms since [`Slots::epoch`]): its activity's times count from then.
    opened: u64,
    activity: Arc<Activity>,
    /// The stamp it is filed under; `None` while parked.
    stamp: Option<u64>,
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// Its address holds its share, every one of them busy.
    PeerFull,
    /// The server holds `max_connections`, every one of them busy.
    Full,
}

/// A connection's place among the [`Slots`], given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.filed.lock().remove(self.id);
    }
}

impl Slots {
    fn new(cap: usize, per_peer: usize) -> Self {
        Self {
            cap,
            per_peer,
            epoch: Instant::now(),
            filed: parking_lot::Mutex::new(Filed::default()),
        }
    }

    /// A place for a new connection from `peer`, made by closing the least recently
    /// active idle connection (its address's own when it holds its share, anyone's at the
    /// total cap) if need be; refused when every candidate is busy.
    fn admit(self: &Arc<Self>, peer: Peer, activity: &Arc<Activity>) -> Result<Slot, Refused> {
        let mut filed = self.filed.lock();
        if filed
            .peers
            .get(&peer)
            .is_some_and(|p| p.open >= self.per_peer)
        {
            let room = filed.take_idle(Some(peer)).ok_or(Refused::PeerFull)?;
            room.activity.close_for_room();
        }
        if filed.open.len() >= self.cap {
            let room = filed.take_idle(None).ok_or(Refused::Full)?;
            room.activity.close_for_room();
        }
        filed.last_id += 1;
        let id = filed.last_id;
        let opened = activity
            .opened
            .saturating_duration_since(self.epoch)
            .as_millis() as u64;
        filed.open.insert(
            id,
            Open {
                peer,
                opened,
                activity: activity.clone(),
                stamp: None,
            },
        );
        filed.peers.entry(peer).or_default().open += 1;
        filed.file(id, opened);
        let _ = activity.slot.set((Arc::downgrade(self), id));
        Ok(Slot {
            slots: self.clone(),
            id,
        })
    }

    /// Files connection `id` again once the request it was parked for is done.
    fn unpark(&self, id: u64) {
        let mut filed = self.filed.lock();
        let Some(open) = filed.open.get(&id) else {
            return;
        };
        // The flag is cleared under the lock: a search that found it idle meanwhile
        // has cleared it already, and filed (or closed) it.
        if open.stamp.is_none() && open.activity.parked.swap(false, Ordering::SeqCst) {
            let stamp = open.opened + open.activity.last.load(Ordering::Relaxed);
            filed.file(id, stamp);
        }
    }
}

impl Filed {
    /// Takes out of the files the least recently active idle connection (`peer`'s, or
    /// anyone's), re-filing or parking the entries it passes on the way.
    fn take_idle(&mut self, peer: Option<Peer>) -> Option<Open> {
        loop {
            let (stamp, id) = match peer {
                Some(peer) => *self.peers.get(&peer)?.by_activity.first()?,
                None => *self.by_activity.first()?,
            };
            let Some(open) = self.open.get(&id) else {
                // Not open: cannot be filed (see `remove`); dropped all the same.
                self.by_activity.remove(&(stamp, id));
                if let Some(p) = peer.and_then(|p| self.peers.get_mut(&p)) {
                    p.by_activity.remove(&(stamp, id));
                }
                continue;
            };
            let (opened, activity) = (open.opened, open.activity.clone());
            // Parked first, busy read after (and the reverse when a request ends, see
            // `Busy`): a request ending meanwhile either finds it parked and files it
            // again, or is seen here as not busy.
            activity.parked.store(true, Ordering::SeqCst);
            if activity.busy.load(Ordering::SeqCst) > 0 {
                self.unfile(id);
                continue;
            }
            activity.parked.store(false, Ordering::SeqCst);
            let last = opened + activity.last.load(Ordering::Relaxed);
            if last > stamp {
                self.unfile(id);
                self.file(id, last);
                continue;
            }
            return self.remove(id);
        }
    }

    fn file(&mut self, id: u64, stamp: u64) {
        let Some(open) = self.open.get_mut(&id) else {
            return;
        };
        open.stamp = Some(stamp);
        self.by_activity.insert((stamp, id));
        if let Some(peer) = self.peers.get_mut(&open.peer) {
            peer.by_activity.insert((stamp, id));
        }
    }

    fn unfile(&mut self, id: u64) {
        let Some(open) = self.open.get_mut(&id) else {
            return;
        };
        if let Some(stamp) = open.stamp.take() {
            self.by_activity.remove(&(stamp, id));
            if let Some(peer) = self.peers.get_mut(&open.peer) {
                peer.by_activity.remove(&(stamp, id));
            }
        }
    }

    /// Forgets connection `id` (closed, or closing to make room).
    fn remove(&mut self, id: u64) -> Option<Open> {
        self.unfile(id);
        let open = self.open.remove(&id)?;
        if let Some(peer) = self.peers.get_mut(&open.peer) {
            peer.open -= 1;
            if peer.open == 0 {
                self.peers.remove(&open.peer);
            }
        }
        Some(open)
    }
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

/// Answers a refused connection with `503` and closes it, without serving its request
/// (`GET /healthz` excepted, see [`asks_for_health`]); the connection lingers (see
/// [`Lingering`]) so a client whose request arrives after the answer reads the answer
/// rather than a reset.
fn refuse(stream: TcpStream, refused: Refused, lingering: &Arc<Lingering>) {
    let (id, evicted) = lingering.enter();
    let lingering = lingering.clone();
    tokio::spawn(async move {
        answer_and_linger(stream, refused, &evicted).await;
        lingering.leave(id);
    });
}

/// The answer to a refused connection.
fn refusal(refused: Refused) -> &'static str {
    static FULL: OnceLock<String> = OnceLock::new();
    static PEER_FULL: OnceLock<String> = OnceLock::new();
    let (answer, message) = match refused {
        Refused::Full => (
            &FULL,
            "the server holds as many connections as it serves at once (server.max_connections), each of them busy with a request; retry shortly",
        ),
        Refused::PeerFull => (
            &PEER_FULL,
            "this address holds as many connections as one address may (server.max_connections_per_peer), each of them busy with a request; retry shortly",
        ),
    };
    answer.get_or_init(|| {
        let body = serde_json::json!({"error": {"code": "host_busy", "message": message}})
            .to_string();
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    })
}

/// The answer to `GET /healthz` on a refused connection: the same as the route's.
const HEALTHY: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 15\r\n\r\n{\"status\":\"ok\"}";

/// Whether the request on a refused connection is `GET /healthz` (or
/// `/api/v1/healthz`), by its first bytes, read for at most [`REFUSAL_LINGER`]: liveness
/// is answered whenever the process runs, even with every connection busy. Nothing else
/// of the request is read, and nothing depends on it but this answer.
async fn asks_for_health(stream: &mut TcpStream) -> bool {
    const HEALTH: [&[u8]; 2] = [b"GET /healthz ", b"GET /api/v1/healthz "];
    let mut start = [0u8; 24];
    let mut filled = 0;
    let read = async {
        while filled < start.len() {
            let n = stream.read(&mut start[filled..]).await?;
            if n == 0 {
                break;
            }
            filled += n;
            let seen = &start[..filled];
            if HEALTH.iter().any(|h| seen.starts_with(h)) {
                return Ok(true);
            }
            if !HEALTH.iter().any(|h| h.starts_with(seen)) {
                break;
            }
        }
        io::Result::Ok(false)
    };
    matches!(
        tokio::time::timeout(REFUSAL_LINGER, read).await,
        Ok(Ok(true))
    )
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

/// Writes the refusal (or the liveness answer), closes the sending side, then reads until
/// the client closes (at most [`REFUSAL_LINGER`] in all). Ended early by `ended` (newer
/// refusals linger), it still answers the refusal if it had not answered yet, as far as
/// the socket takes it at once.
async fn answer_and_linger(mut stream: TcpStream, refused: Refused, ended: &tokio::sync::Notify) {
    let health = tokio::select! {
        health = asks_for_health(&mut stream) => health,
        () = ended.notified() => {
            let _ = stream.try_write(refusal(refused).as_bytes());
            return;
        }
    };
    let answer = if health { HEALTHY } else { refusal(refused) };
    let drain = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        io::Result::Ok(())
    };
    tokio::select! {
        _ = tokio::time::timeout(REFUSAL_LINGER, drain) => {}
        () = ended.notified() => {}
    }
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
    /// Since when a write has found the socket full ([`NOT_WAITING`]: the last write
    /// went through): a client that stops reading its answers.
    write_blocked_since: AtomicU64,
    /// Wakes the watchdog when a write first finds the socket full, so the stall is
    /// timed from then.
    blocked: tokio::sync::Notify,
    /// Wakes the watchdog when the connection is to close to make room for another.
    room_wanted: tokio::sync::Notify,
    /// Set aside by a search of the [`Slots`] while busy: to be filed again when its
    /// requests are done.
    parked: AtomicBool,
    /// Its place among the [`Slots`] (the slots and its id).
    slot: OnceLock<(Weak<Slots>, u64)>,
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
            write_blocked_since: AtomicU64::new(NOT_WAITING),
            blocked: tokio::sync::Notify::new(),
            room_wanted: tokio::sync::Notify::new(),
            parked: AtomicBool::new(false),
            slot: OnceLock::new(),
        }
    }

    /// Closes the connection to make room for another (it no longer counts among the
    /// [`Slots`]).
    fn close_for_room(&self) {
        self.room_wanted.notify_one();
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
        self.write_blocked_since
            .store(NOT_WAITING, Ordering::Release);
    }

    fn write_blocked(&self) {
        let first = self
            .write_blocked_since
            .compare_exchange(NOT_WAITING, self.now(), Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if first {
            self.blocked.notify_one();
        }
    }

    fn after_write(&self, result: &Poll<io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(n)) if *n > 0 => self.wrote(),
            Poll::Pending => self.write_blocked(),
            Poll::Ready(_) => {}
        }
    }

    fn request_started(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NOT_WAITING, Ordering::Release);
        Busy(self.clone())
    }

    fn verdict(&self, limits: &ServerLimits, now: u64) -> Verdict {
        let header = limits.header_timeout.as_millis() as u64;
        let idle = limits.idle_timeout.as_millis() as u64;
        let blocked = self.write_blocked_since.load(Ordering::Acquire);
        if blocked != NOT_WAITING {
            // Not reading what it is sent, busy or not: nothing else moves until it does.
            return if now >= blocked + header {
                Verdict::Drop
            } else {
                Verdict::WaitUntil(Duration::from_millis(blocked + header))
            };
        }
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
        let activity = &self.0;
        // The idle clock starts when the answer is done.
        activity.last.store(activity.now(), Ordering::Relaxed);
        // Not busy first, parked read after (see `Filed::take_idle`).
        let was = activity.busy.fetch_sub(1, Ordering::SeqCst);
        if was == 1 && activity.parked.load(Ordering::SeqCst) {
            if let Some((slots, id)) = activity.slot.get() {
                if let Some(slots) = slots.upgrade() {
                    slots.unpark(*id);
                }
            }
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: Peer,
    activity: Arc<Activity>,
    router: Router,
    limits: ServerLimits,
    mut stopped: watch::Receiver<bool>,
) {
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = activity.request_started();
            let router = router.clone();
            let body_activity = activity.clone();
            let stall = limits.header_timeout;
            async move {
                let stalled = Arc::new(AtomicBool::new(false));
                let mut request = request.map(|body| {
                    Body::new(StallBounded::new(
                        body,
                        stall,
                        stalled.clone(),
                        body_activity,
                    ))
                });
                request.extensions_mut().insert(peer);
                let mut response = match router.oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if stalled.load(Ordering::Acquire) {
                    // The rest of that body is not coming: nothing more can be read.
                    response.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(
                    response.map(|body| Body::new(UntilDone { body, _busy: busy })),
                )
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None)
        // What one connection may make the server buffer of a request's head (hyper's
        // default, about 400 KiB, times the connection cap would be gigabytes).
        .max_buf_size(MAX_HEAD_BYTES)
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
            () = activity.blocked.notified() => {}
            () = activity.room_wanted.notified() => {
                // Chosen idle; a request that began since then (a client's request
                // crossing the decision) is answered first.
                if activity.busy.load(Ordering::Acquire) == 0 {
                    return;
                }
                closing = true;
                connection.as_mut().graceful_shutdown();
            }
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

/// The socket of a connection, noting every read and write in its [`Activity`], and
/// putting hyper's own answers to requests it cannot parse in the contract's JSON shape.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// A JSON answer being written in place of hyper's, and how much of it is written.
    replacing: Option<(Vec<u8>, usize)>,
}

impl Watched {
    fn new(inner: TcpStream, activity: Arc<Activity>) -> Self {
        Self {
            inner,
            activity,
            replacing: None,
        }
    }

    /// Writes `buf`, or its JSON replacement when it is hyper's own error answer (then
    /// reports all of `buf` written once the replacement is).
    fn write_answer(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.replacing.is_none() {
            if let Some(answer) = json_for_hypers_answer(buf) {
                self.replacing = Some((answer, 0));
            }
        }
        let Some((answer, written)) = &mut self.replacing else {
            let result = Pin::new(&mut self.inner).poll_write(cx, buf);
            self.activity.after_write(&result);
            return result;
        };
        while *written < answer.len() {
            let result = Pin::new(&mut self.inner).poll_write(cx, &answer[*written..]);
            self.activity.after_write(&result);
            match result {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.replacing = None;
        Poll::Ready(Ok(buf.len()))
    }
}

/// Hyper answers a request it cannot parse by itself, before any handler runs: a bare
/// `400`, `414` or `431` with an empty body (our own answers always have a JSON body).
/// This is that answer in the contract's shape, or `None` for any other bytes.
fn json_for_hypers_answer(buf: &[u8]) -> Option<Vec<u8>> {
    // Every response head passes here: most are ruled out by their first bytes.
    if !buf.starts_with(b"HTTP/1.1 4") {
        return None;
    }
    let head = std::str::from_utf8(buf.strip_suffix(b"\r\n\r\n")?).ok()?;
    if head.contains("\r\n\r\n") {
        return None;
    }
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    if !lines.any(|l| l.eq_ignore_ascii_case("content-length: 0")) {
        return None;
    }
    let (status_line, message) = match status {
        "400" => (
            "400 Bad Request",
            "the request is not valid HTTP/1.1 (its request line or a header is malformed)",
        ),
        "414" => ("414 URI Too Long", "the request's URI is too long"),
        "431" => (
            "431 Request Header Fields Too Large",
            "the request's headers are too large",
        ),
        _ => return None,
    };
    let body =
        serde_json::json!({"error": {"code": "invalid_request", "message": message}}).to_string();
    Some(
        format!(
            "HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
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
        self.write_answer(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Hyper's own answer is a head alone, in one slice.
        let mut parts = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (parts.next(), parts.next()) {
            if self.replacing.is_some() || json_for_hypers_answer(only).is_some() {
                return self.write_answer(cx, only);
            }
        }
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.after_write(&result);
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

/// A request body that fails with [`BodyStalled`] when, once it is read, no part of it
/// arrives for `stall`, or when past its first `stall` it has averaged less than
/// [`MIN_BODY_RATE`] (a client dripping a byte now and then would otherwise hold its
/// connection, and the buffer of what it sent, forever). Dropped before its end (a
/// handler that answered without reading it: a `401`, a `404`), the rest is read and
/// discarded in the background (bounded, see [`discard`]) with the connection still busy,
/// so the client reads the answer rather than a reset, the connection stays usable, and
/// the discarded bytes are not taken for the start of a next request. A stalled body is
/// not discarded: its connection closes after the answer.
struct StallBounded {
    inner: Option<Incoming>,
    stall: Duration,
    /// Started at the first read: a handler may take its time before reading.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the body was first read, when a part of it last arrived, and its bytes so far.
    first_read: Option<tokio::time::Instant>,
    last_part: Option<tokio::time::Instant>,
    received: u64,
    stalled: Arc<AtomicBool>,
    activity: Arc<Activity>,
}

/// The least average rate of a request body (bytes per second) past its first
/// `header_timeout`.
const MIN_BODY_RATE: u64 = 4096;

impl StallBounded {
    fn new(
        inner: Incoming,
        stall: Duration,
        stalled: Arc<AtomicBool>,
        activity: Arc<Activity>,
    ) -> Self {
        Self {
            inner: Some(inner),
            stall,
            timer: None,
            first_read: None,
            last_part: None,
            received: 0,
            stalled,
            activity,
        }
    }

    /// When the body counts as stalled if nothing more arrives.
    fn deadline(&self, now: tokio::time::Instant) -> tokio::time::Instant {
        let first = self.first_read.unwrap_or(now);
        let by_rate = first
            + self.stall
            + Duration::from_secs_f64(self.received as f64 / MIN_BODY_RATE as f64);
        (self.last_part.unwrap_or(first) + self.stall).min(by_rate)
    }
}

impl Drop for StallBounded {
    fn drop(&mut self) {
        if self.stalled.load(Ordering::Acquire) {
            return;
        }
        if let Some(rest) = self.inner.take().filter(|b| !b.is_end_stream()) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let busy = self.activity.request_started();
                runtime.spawn(async move {
                    discard(rest).await;
                    drop(busy);
                });
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
        let now = tokio::time::Instant::now();
        this.first_read.get_or_insert(now);
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
                    this.received += data.map_or(0, |d| d.len() as u64);
                }
                this.last_part = Some(now);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let deadline = this.deadline(now);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.stalled.store(true, Ordering::Release);
                        Poll::Ready(Some(Err(Box::new(BodyStalled(this.stall)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
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
            max_connections_per_peer: None,
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
    fn the_refusals_are_the_contracts_json_error_and_liveness_the_routes_answer() {
        for (answer, status) in [
            (refusal(Refused::Full), "503"),
            (refusal(Refused::PeerFull), "503"),
            (HEALTHY, "200"),
        ] {
            let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
            assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.parse().ok())
                .expect("content-length");
            assert_eq!(length, body.len());
            let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
            if status == "503" {
                assert_eq!(json["error"]["code"], "host_busy");
            } else {
                assert_eq!(json, serde_json::json!({"status": "ok"}));
            }
        }
        assert!(refusal(Refused::PeerFull).contains("server.max_connections_per_peer"));
    }

    #[test]
    fn only_hypers_own_bodyless_errors_are_replaced() {
        let hypers = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Mon, 23 Nov 2026 08:00:00 GMT\r\n\r\n";
        let answer = json_for_hypers_answer(hypers).expect("replaced");
        let text = String::from_utf8(answer).expect("UTF-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(json["error"]["code"], "invalid_request");
        for ours in [
            // Our own errors carry a body.
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"[..],
            // A head whose body follows separately.
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 17\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
        ] {
            assert!(json_for_hypers_answer(ours).is_none());
        }
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

    fn peer(n: u8) -> Peer {
        Peer::of(std::net::IpAddr::from([10, 0, 0, n]))
    }

    /// Connections (their activity) admitted from `peer`.
    fn open(slots: &Arc<Slots>, peer: Peer, n: usize) -> Vec<(Arc<Activity>, Slot)> {
        (0..n)
            .map(|_| {
                let activity = Arc::new(Activity::new());
                let slot = slots.admit(peer, &activity).expect("admitted");
                (activity, slot)
            })
            .collect()
    }

    fn told_to_close(activity: &Activity) -> bool {
        futures::FutureExt::now_or_never(activity.room_wanted.notified()).is_some()
    }

    #[test]
    fn an_address_at_its_share_makes_room_from_its_own_least_recently_active() {
        let slots = Arc::new(Slots::new(10, 2));
        let held = open(&slots, peer(1), 2);
        // The first was active after the second opened.
        held[0].0.last.store(500, Ordering::Relaxed);
        let other = open(&slots, peer(2), 1);
        let third = open(&slots, peer(1), 1);
        assert!(told_to_close(&held[1].0), "the least recently active");
        assert!(!told_to_close(&held[0].0));
        assert!(
            !told_to_close(&other[0].0),
            "another address's is not touched"
        );
        let filed = slots.filed.lock();
        assert_eq!(filed.open.len(), 3);
        assert_eq!(filed.peers[&peer(1)].open, 2);
        drop(filed);
        drop(third);
        drop(held);
        drop(other);
        let filed = slots.filed.lock();
        assert!(filed.open.is_empty() && filed.peers.is_empty());
        assert!(filed.by_activity.is_empty());
    }

    #[test]
    fn at_the_cap_the_least_recently_active_idle_connection_of_anyone_makes_room() {
        let slots = Arc::new(Slots::new(3, 3));
        let a = open(&slots, peer(1), 1);
        let b = open(&slots, peer(2), 1);
        let c = open(&slots, peer(3), 1);
        // Filed when they opened; active since in the order a, c, b.
        a[0].0.last.store(100, Ordering::Relaxed);
        b[0].0.last.store(300, Ordering::Relaxed);
        c[0].0.last.store(200, Ordering::Relaxed);
        let d = open(&slots, peer(4), 1);
        assert!(told_to_close(&a[0].0));
        assert!(!told_to_close(&b[0].0) && !told_to_close(&c[0].0));
        d[0].0.last.store(400, Ordering::Relaxed);
        let _e = open(&slots, peer(4), 1);
        assert!(told_to_close(&c[0].0));
        assert!(!told_to_close(&b[0].0));
        assert_eq!(slots.filed.lock().open.len(), 3);
    }

    #[test]
    fn busy_connections_are_not_closed_and_rejoin_when_done() {
        let slots = Arc::new(Slots::new(3, 2));
        let a = open(&slots, peer(1), 2);
        let b = open(&slots, peer(2), 1);
        let mut busy: Vec<Busy> = a
            .iter()
            .chain(&b)
            .map(|(x, _)| x.request_started())
            .collect();
        let refused = |p| slots.admit(p, &Arc::new(Activity::new())).err();
        assert_eq!(refused(peer(1)), Some(Refused::PeerFull));
        assert_eq!(refused(peer(3)), Some(Refused::Full));
        // Searched and parked: out of the files until their requests are done.
        assert!(slots.filed.lock().by_activity.is_empty());
        drop(busy.remove(0));
        let c = open(&slots, peer(3), 1);
        assert!(told_to_close(&a[0].0), "idle again, and closed for room");
        assert!(!told_to_close(&a[1].0) && !told_to_close(&b[0].0));
        busy.push(c[0].0.request_started());
        assert_eq!(refused(peer(4)), Some(Refused::Full));
        drop(busy);
        assert!(open(&slots, peer(4), 1).len() == 1);
        assert!(
            told_to_close(&a[1].0),
            "the least recently active of those done"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_asking_for_liveness_is_told() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        for (request, health) in [
            ("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", true),
            ("GET /api/v1/healthz HTTP/1.1\r\n\r\n", true),
            ("GET /healthzz HTTP/1.1\r\n\r\n", false),
            ("POST /healthz HTTP/1.1\r\n\r\n", false),
            ("GET /api/v1/connectors HTTP/1.1\r\n\r\n", false),
            ("", false),
        ] {
            let mut client = TcpStream::connect(addr).await.expect("connect");
            let (mut served, _) = listener.accept().await.expect("accept");
            // Sent in two parts: the first bytes alone do not decide.
            let (first, rest) = request.split_at(request.len().min(5));
            client.write_all(first.as_bytes()).await.expect("write");
            let asked = tokio::spawn(async move { asks_for_health(&mut served).await });
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(rest.as_bytes()).await.expect("write");
            assert_eq!(asked.await.expect("task"), health, "{request:?}");
        }
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
