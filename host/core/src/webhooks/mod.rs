//! Inbound webhooks: verify, store, de-duplicate, translate, route, deliver.
//!
//! The pipeline is built so that a delivery is never lost and never delivered twice:
//!
//! 1. The signature is verified over the raw bytes ([`verify`]) before anything else.
//! 2. The connector's `translate-webhook` turns it into messages; each names a routing
//!    key that is looked up in the directory's key → bindings index (one lookup, however
//!    many bindings exist), and each matching binding's `accept` filter decides.
//! 3. The delivery, marked done, and its messages are stored in one transaction, which
//!    finds a delivery id already stored for the connector within the window (answered
//!    `duplicate`, nothing written). The answer waits for that commit: a process that dies
//!    before it has acknowledged nothing, and the sender sends again. Deliveries arriving
//!    together share commits (the stores' group commit).
//!
//! Routing runs inline for up to two seconds; past that (or when routing fails) the
//! delivery is stored pending before it is answered `queued`, and the work finishes in the
//! background: the messages are appended and the delivery marked done in one transaction,
//! which refuses to run twice for the same delivery. Every stored unfinished delivery
//! carries a claim of the replica working on it ([`crate::replicas`]); anything not done
//! when a process dies is picked up at its next start, or by any replica once the claim
//! lapses; a failed translation is kept, visible, and retried on start or on request.

pub mod verify;

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use connector_trace::InSpan;
use serde::Serialize;
use serde_json::{json, Value};

use crate::audit::Audit;
use crate::catalog::Catalog;
use crate::config::HostConfig;
use crate::inbox::Inbox;
use crate::replicas::ReplicaSync;
use crate::state::State;
use connector_model::audit::{target, Actor, AuditEntry};
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::ids::{now_rfc3339, truncate};
use connector_model::records::Claim;
use connector_model::records::{DeliveryRecord, DeliveryStatus, MessageRecord};
use connector_runtime::{wit, Caller, GuestError};
use connector_store::ClaimScope;
use connector_store::Store;

/// How long a webhook request waits for routing before answering `queued`.
pub const INLINE_ROUTING: Duration = Duration::from_secs(2);
/// How long a delivery id is remembered for de-duplication.
pub const DEDUP_WINDOW_SECS: i64 = 7 * 24 * 3600;

/// What became of a received (or retried) webhook delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookStatus {
    /// Stored and routed: `routed_to` names the units that got messages.
    Accepted,
    /// Seen before (or already done): nothing delivered again.
    Duplicate,
    /// An event the host answers without storing (GitHub's `ping`).
    Ignored,
    /// Stored; routing goes on in the background (or failed and is kept for a retry).
    Queued,
}

impl WebhookStatus {
    /// The contract's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookStatus::Accepted => "accepted",
            WebhookStatus::Duplicate => "duplicate",
            WebhookStatus::Ignored => "ignored",
            WebhookStatus::Queued => "queued",
        }
    }
}

/// How a delivery's audit record names who finished it and as what: the record is
/// written in the transaction that stores the delivery's messages, so a delivery that
/// reached an inbox always has it.
#[derive(Debug, Clone)]
pub(crate) struct DeliveryAudit {
    actor: Actor,
    /// The action whatever the verdict; `None`: `delivery.<verdict>`.
    action: Option<&'static str>,
}

impl DeliveryAudit {
    /// `delivery.<verdict>` (`delivery.routed` once routed) by `actor`: the sender for a
    /// delivery it sent, the host for one a sweep finished.
    pub(crate) fn by(actor: Actor) -> DeliveryAudit {
        DeliveryAudit {
            actor,
            action: None,
        }
    }

    /// `delivery.retry` by `actor` (whoever asked for the retry), whatever the verdict.
    pub(crate) fn retry_by(actor: Actor) -> DeliveryAudit {
        DeliveryAudit {
            actor,
            action: Some("delivery.retry"),
        }
    }

    /// The record of delivery `delivery` to connector `slug` ending as `status`, routed to
    /// `routed_to`.
    pub(crate) fn entry(
        &self,
        slug: &str,
        delivery: &str,
        status: WebhookStatus,
        routed_to: &[String],
    ) -> AuditEntry {
        let action = self.action.unwrap_or(match status {
            WebhookStatus::Accepted => "delivery.routed",
            WebhookStatus::Duplicate => "delivery.duplicate",
            WebhookStatus::Ignored => "delivery.ignored",
            WebhookStatus::Queued => "delivery.queued",
        });
        let target = target::delivery(&truncate(slug, 128), &truncate(delivery, 128));
        Audit::new(&self.actor, action, target)
            .with_details(json!({"verdict": status.as_str(), "routedTo": routed_to}))
            .into_entry("ok")
    }
}

/// The answer to a webhook delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookOutcome {
    /// The delivery id.
    pub delivery: String,
    /// What became of it.
    pub status: WebhookStatus,
    /// The units it reached.
    pub routed_to: Vec<String>,
}

/// Why processing a stored delivery did not finish it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeliveryError {
    /// Another task on this replica is processing it right now.
    #[error("this delivery is already being processed")]
    InFlight,
    /// Another worker (a sweep, another replica) finished it meanwhile: nothing was
    /// stored or recorded again.
    #[error("this delivery was finished meanwhile by another worker")]
    AlreadyDone,
    /// The database did not answer: the delivery stays pending under this replica's claim
    /// and is taken up again when the claim lapses.
    #[error(transparent)]
    StoreUnavailable(connector_store::StoreError),
    /// Translation, routing or storing failed: the delivery is kept `failed` with this
    /// error, visible and retried at the next start or on request.
    #[error("{0}")]
    Failed(String),
}

/// Why routing a delivery failed: the text kept on the failed delivery.
#[derive(Debug, thiserror::Error)]
enum RouteFailure {
    #[error("connector `{0}` is no longer installed")]
    Uninstalled(String),
    /// Loading the component or running `translate-webhook` failed.
    #[error("translate-webhook: {0}")]
    Translate(GuestError),
    /// The connector's own refusal.
    #[error("the connector refused the delivery: {0}")]
    Refused(String),
    #[error("the connector produced a payload that is not JSON: {0}")]
    PayloadNotJson(serde_json::Error),
    #[error("accept: {0}")]
    Accept(GuestError),
}

/// What the operator sees of one delivery.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// The connector it was sent to.
    pub connector: String,
    /// Its id.
    pub delivery: String,
    /// The sender's event name, if it gave one.
    pub event: Option<String>,
    /// Where it is.
    pub status: DeliveryStatus,
    /// How many times it was processed.
    pub attempts: u32,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The units it reached.
    pub routed_to: Vec<String>,
    /// When it arrived (RFC 3339).
    pub received_at: String,
}

/// Whether a webhook request header is stored with the delivery and handed to the guest
/// (CONTRACT §3): `content-type`, `user-agent`, the schemes' own headers and `x-*`
/// headers except credentials and proxy data. `authorization`, `cookie`, `proxy-*` and
/// every other header never are.
fn is_stored_header(name: &str) -> bool {
    const DENIED_X: [&str; 2] = ["x-api-key", "x-real-ip"];
    // `x-auth` covers `x-auth-*` and look-alikes such as `x-authorization`.
    const DENIED_X_PREFIXES: [&str; 2] = ["x-auth", "x-forwarded-"];
    match name {
        "content-type" | "user-agent" | "webhook-id" | "webhook-timestamp"
        | "webhook-signature" => true,
        _ if name.starts_with("x-") => {
            !DENIED_X.contains(&name) && !DENIED_X_PREFIXES.iter().any(|p| name.starts_with(p))
        }
        _ => false,
    }
}

/// The request headers a delivery keeps (names lower-cased), see [`is_stored_header`].
fn stored_headers(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| is_stored_header(name.as_str()))
        .filter_map(|(name, value)| {
            Some((name.as_str().to_string(), value.to_str().ok()?.to_string()))
        })
        .collect()
}

/// Deliveries being processed on this replica, by (connector, delivery id).
pub(crate) type InFlightSet = parking_lot::Mutex<std::collections::HashSet<(String, String)>>;

/// One delivery marked as being processed on this replica for as long as the guard lives:
/// the mark goes when the guard is dropped, whether the work finished, failed or its
/// future was dropped mid-flight.
struct InFlight<'a> {
    set: &'a InFlightSet,
    key: (String, String),
}

impl<'a> InFlight<'a> {
    /// Marks `record` in flight, or `None` if it already is.
    fn begin(set: &'a InFlightSet, record: &DeliveryRecord) -> Option<Self> {
        let key = (record.connector.clone(), record.delivery_id.clone());
        // Not `then_some`: that would build (and drop) a guard for a key another task
        // holds, removing its mark — and do it while the lock is still held.
        if !set.lock().insert(key.clone()) {
            return None;
        }
        Some(InFlight { set, key })
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.set.lock().remove(&self.key);
    }
}

/// How often every host looks for deliveries nobody is working on.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// How many deliveries one claim takes (and are then processed at once).
const CLAIM_BATCH: u32 = 8;

/// Webhook ingest and the delivery worker.
pub(crate) struct Webhooks {
    config: Arc<HostConfig>,
    store: Arc<dyn Store>,
    state: Arc<State>,
    catalog: Arc<Catalog>,
    inbox: Arc<Inbox>,
    /// Claimed deliveries are routed with the state refreshed first.
    replicas: Arc<ReplicaSync>,
    in_flight: InFlightSet,
    /// Webhook bodies being read, and their shares (see [`Self::admit`]).
    reading: Arc<Reading>,
}

/// The least of webhook bodies that may be being read at once, whatever
/// `max_webhook_bytes` is; otherwise four of the largest.
const MIN_READING_BYTES: usize = 64 * 1024 * 1024;
/// How long a webhook body may take to arrive in all: senders post a delivery at once,
/// and a body being read holds part of what the host reads at once.
pub const WEBHOOK_BODY_TIME: Duration = Duration::from_secs(30);
/// How long a body within its share waits for the budget to have room before it is
/// answered `503` (see [`Reading`]).
const WAIT_FOR_ROOM: Duration = Duration::from_secs(5);

/// The webhook reading budget: bytes of webhook bodies being read at once (bodies that
/// cannot be verified until they are whole), shared fairly so that no sender can take
/// the budget from others.
///
/// The budget is split evenly among the connectors with bodies being read, and each
/// connector's part evenly among the remote addresses sending to it (as
/// `crate::http::Peer` counts them: an IPv6 address by its /64); bodies
/// of an unknown address (a platform serving the router without connect info) share
/// only their connector's part. Shares shrink as more senders are active and grow as
/// they finish. A body's bytes are counted as they arrive:
///
/// - one that would take its sender past its share is cut off (`503 host_busy`) and
///   gives its bytes back: a sender holding its share only ever waits for itself;
/// - one within its share that finds the whole budget taken (shares shrank when it
///   arrived) first cuts off the bodies of every sender now past its share, largest
///   first, which makes room at once when every address is known; else it waits for
///   room, at most [`WAIT_FOR_ROOM`].
///
/// So one sender holding its share makes others wait for theirs, never for its. The
/// lock is held for bookkeeping only, never across an await.
pub(crate) struct Reading {
    total: u64,
    /// How long a body within its share waits for room ([`WAIT_FOR_ROOM`]).
    wait: Duration,
    bodies: parking_lot::Mutex<Bodies>,
    /// Woken whenever bytes are given back, for bodies waiting for room.
    room: tokio::sync::Notify,
}

/// The bodies being read, by connector and sender.
#[derive(Default)]
struct Bodies {
    last_id: u64,
    used: u64,
    each: std::collections::HashMap<u64, Body>,
    connectors: std::collections::HashMap<Arc<str>, ConnectorBodies>,
}

/// One body being read.
struct Body {
    connector: Arc<str>,
    peer: Option<IpAddr>,
    held: u64,
    /// Cut off: it may take no more, and its reader is told through `cut`.
    cut_off: bool,
    cut: Arc<tokio::sync::Notify>,
}

/// The bodies being read for one connector.
#[derive(Default)]
struct ConnectorBodies {
    used: u64,
    /// Senders of a known address (each has a share of the connector's part).
    known: usize,
    senders: std::collections::HashMap<Option<IpAddr>, Sender>,
}

/// The bodies one address is sending to one connector.
#[derive(Default)]
struct Sender {
    used: u64,
    bodies: std::collections::HashSet<u64>,
}

impl Reading {
    fn new(total: u64, wait: Duration) -> Self {
        Self {
            total,
            wait,
            bodies: parking_lot::Mutex::new(Bodies::default()),
            room: tokio::sync::Notify::new(),
        }
    }

    /// Counts a new body of `peer` for `connector` (holding nothing yet).
    fn enter(&self, connector: &str, peer: Option<IpAddr>) -> (u64, Arc<tokio::sync::Notify>) {
        let mut bodies = self.bodies.lock();
        bodies.last_id += 1;
        let id = bodies.last_id;
        let cut = Arc::new(tokio::sync::Notify::new());
        let connector: Arc<str> = Arc::from(connector);
        let of_connector = bodies.connectors.entry(connector.clone()).or_default();
        let sender = of_connector.senders.entry(peer).or_insert_with(|| {
            if peer.is_some() {
                of_connector.known += 1;
            }
            Sender::default()
        });
        sender.bodies.insert(id);
        bodies.each.insert(
            id,
            Body {
                connector,
                peer,
                held: 0,
                cut_off: false,
                cut: cut.clone(),
            },
        );
        (id, cut)
    }

    /// Takes room for body `id`, `seen` bytes long so far; `false` when it is cut off.
    async fn take(&self, id: u64, seen: u64) -> bool {
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let room = self.room.notified();
            match self.bodies.lock().take(self.total, id, seen) {
                Taken::Yes => return true,
                Taken::CutOff => return false,
                Taken::NoRoomYet => {}
            }
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                let mut bodies = self.bodies.lock();
                bodies.cut(id);
                return false;
            }
        }
    }

    /// Forgets body `id`, giving its bytes back.
    fn leave(&self, id: u64) {
        let mut bodies = self.bodies.lock();
        let Some(body) = bodies.each.remove(&id) else {
            return;
        };
        bodies.give_back(&body.connector, body.peer, body.held);
        if let Some(of_connector) = bodies.connectors.get_mut(&body.connector) {
            if let Some(sender) = of_connector.senders.get_mut(&body.peer) {
                sender.bodies.remove(&id);
                if sender.bodies.is_empty() {
                    of_connector.senders.remove(&body.peer);
                    if body.peer.is_some() {
                        of_connector.known -= 1;
                    }
                }
            }
            if of_connector.senders.is_empty() {
                bodies.connectors.remove(&body.connector);
            }
        }
        drop(bodies);
        self.room.notify_waiters();
    }
}

/// What [`Bodies::take`] decided.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    Yes,
    CutOff,
    NoRoomYet,
}

impl Bodies {
    /// The share of `peer`'s bodies for `connector` out of `total`.
    fn share(&self, total: u64, connector: &str, peer: Option<IpAddr>) -> u64 {
        let part = total / self.connectors.len().max(1) as u64;
        match (peer, self.connectors.get(connector)) {
            (Some(_), Some(c)) => part / c.known.max(1) as u64,
            _ => part,
        }
    }

    fn take(&mut self, total: u64, id: u64, seen: u64) -> Taken {
        let Some(body) = self.each.get(&id) else {
            return Taken::CutOff;
        };
        if body.cut_off {
            return Taken::CutOff;
        }
        let Some(more) = seen.checked_sub(body.held).filter(|more| *more > 0) else {
            return Taken::Yes;
        };
        let (connector, peer) = (body.connector.clone(), body.peer);
        let share = self.share(total, &connector, peer);
        let Some(of_connector) = self.connectors.get(&connector) else {
            return Taken::CutOff;
        };
        let sender_used = of_connector.senders.get(&peer).map_or(0, |s| s.used);
        // A body of an unknown address shares its connector's part with every other.
        let used = if peer.is_some() {
            sender_used
        } else {
            of_connector.used
        };
        if used + more > share {
            self.cut(id);
            return Taken::CutOff;
        }
        if self.used + more > total {
            self.cut_past_shares(total);
        }
        if self.used + more > total {
            return Taken::NoRoomYet;
        }
        self.used += more;
        if let Some(of_connector) = self.connectors.get_mut(&connector) {
            of_connector.used += more;
            if let Some(sender) = of_connector.senders.get_mut(&peer) {
                sender.used += more;
            }
        }
        if let Some(body) = self.each.get_mut(&id) {
            body.held += more;
        }
        Taken::Yes
    }

    /// Cuts off the bodies of every sender past its share, its largest first, until it
    /// is within it.
    fn cut_past_shares(&mut self, total: u64) {
        let mut past = Vec::new();
        for (name, of_connector) in &self.connectors {
            for (peer, sender) in &of_connector.senders {
                let share = self.share(total, name, *peer);
                if sender.used <= share {
                    continue;
                }
                let mut largest: Vec<(u64, u64)> = sender
                    .bodies
                    .iter()
                    .filter_map(|id| Some((self.each.get(id)?.held, *id)))
                    .collect();
                largest.sort_unstable_by(|a, b| b.cmp(a));
                let mut over = sender.used - share;
                for (held, id) in largest {
                    if over == 0 || held == 0 {
                        break;
                    }
                    past.push(id);
                    over = over.saturating_sub(held);
                }
            }
        }
        for id in past {
            self.cut(id);
        }
    }

    /// Cuts body `id` off: its bytes are given back and its reader told.
    fn cut(&mut self, id: u64) {
        let Some(body) = self.each.get_mut(&id) else {
            return;
        };
        let held = std::mem::take(&mut body.held);
        body.cut_off = true;
        body.cut.notify_one();
        let (connector, peer) = (body.connector.clone(), body.peer);
        self.give_back(&connector, peer, held);
    }

    /// Gives back `bytes` held by a body of `peer` for `connector`.
    fn give_back(&mut self, connector: &str, peer: Option<IpAddr>, bytes: u64) {
        self.used -= bytes;
        if let Some(of_connector) = self.connectors.get_mut(connector) {
            of_connector.used -= bytes;
            if let Some(sender) = of_connector.senders.get_mut(&peer) {
                sender.used -= bytes;
            }
        }
    }
}

/// A delivery admitted to have its body read: as the body arrives, it takes its bytes
/// from the reading budget ([`Self::take`]) within its sender's share, and gives them
/// back when dropped.
pub struct BodyAdmission {
    reading: Arc<Reading>,
    id: u64,
    cut: Arc<tokio::sync::Notify>,
    limit: usize,
}

impl BodyAdmission {
    /// The most the body may hold (`max_webhook_bytes`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes room for a body `seen` bytes long so far (only what arrived is counted, so
    /// a large declared length costs nothing until it is sent); `false` when the body is
    /// cut off, its sender past its share of the reading budget, or no room came within
    /// [`WAIT_FOR_ROOM`] (answer `503 host_busy`).
    pub fn take(&self, seen: u64) -> impl Future<Output = bool> + Send + 'static {
        let (reading, id) = (self.reading.clone(), self.id);
        async move { reading.take(id, seen).await }
    }

    /// Resolves when the body is cut off (another sender needed the room its sender
    /// holds past its share): stop reading it and answer `503 host_busy`.
    pub fn cut_off(&self) -> impl Future<Output = ()> + Send + 'static {
        let cut = self.cut.clone();
        async move { cut.notified().await }
    }
}

impl Drop for BodyAdmission {
    fn drop(&mut self) {
        self.reading.leave(self.id);
    }
}

/// The span of appending a delivery's messages to their units' inboxes (with the
/// delivery's outcome, one transaction).
fn inbox_span(messages: usize) -> connector_trace::Span {
    connector_trace::span("inbox append")
        .attr("messages", messages)
        .start()
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A new message id: `msg_`, the time in milliseconds as 12 hex digits, then 16 random
/// characters (unique across replicas). Ids made later sort after earlier ones, so the
/// inbox's unique index on the id grows at its end: a commit of many messages writes one
/// index page, where random ids wrote a page per message (twice with SQLite, log and
/// database file).
fn message_id() -> String {
    let ms = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
    format!("msg_{ms:012x}{}", crate::auth::random_secret(12))
}

/// The answer to a delivery that does not verify: `401 invalid_signature`, or `400` for a
/// missing header the scheme requires.
fn refusal(e: verify::VerifyError) -> HostError {
    if e.is_authentication() {
        HostError::new(ErrorCode::InvalidSignature, e.to_string())
    } else {
        HostError::invalid_request(e.to_string())
    }
}

impl Webhooks {
    pub(crate) fn new(
        config: Arc<HostConfig>,
        store: Arc<dyn Store>,
        state: Arc<State>,
        catalog: Arc<Catalog>,
        inbox: Arc<Inbox>,
        replicas: Arc<ReplicaSync>,
    ) -> Self {
        let reading = config
            .max_webhook_bytes
            .saturating_mul(4)
            .max(MIN_READING_BYTES) as u64;
        Self {
            config,
            store,
            state,
            catalog,
            inbox,
            reading: Arc::new(Reading::new(reading, WAIT_FOR_ROOM)),
            replicas,
            in_flight: InFlightSet::default(),
        }
    }

    /// Admits a delivery's body to be read, or refuses it before anything is buffered:
    /// `404` for a slug that takes no webhooks, `413` for a declared length past
    /// `max_webhook_bytes`, `401`/`400` when its headers cannot
    /// verify (no secret configured, signature missing or malformed, a stale timestamp:
    /// see [`verify::precheck`]). Its body is then read through the admission, within
    /// the reading budget (four times `max_webhook_bytes`, at least 64 MiB) and its
    /// sender's share of it ([`Reading`]; `peer` is the sender's address, `None` when
    /// unknown), so uploads that cannot be verified yet can neither fill the host's
    /// memory nor keep other senders' deliveries out.
    pub(crate) fn admit(
        &self,
        slug: &str,
        headers: &http::HeaderMap,
        peer: Option<IpAddr>,
    ) -> HostResult<BodyAdmission> {
        let scheme = self.accepts(slug)?;
        let limit = self.config.max_webhook_bytes;
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > limit) {
            return Err(HostError::new(
                ErrorCode::PayloadTooLarge,
                format!("the webhook body is larger than the limit of {limit} bytes"),
            ));
        }
        let secrets = self.config.connector(slug).webhook_secrets;
        verify::precheck(scheme, &secrets, headers, now_unix()).map_err(refusal)?;
        let (id, cut) = self.reading.enter(slug, peer);
        Ok(BodyAdmission {
            reading: self.reading.clone(),
            id,
            cut,
            limit,
        })
    }

    /// How long a replica's claim on a webhook delivery lasts: long enough for a
    /// translation and its accept calls (each bounded by the call timeout), short enough
    /// that a dead replica's work is picked up soon.
    pub(crate) fn delivery_lease(&self) -> Duration {
        let call = self.config.limits.call_timeout;
        (call * 2 + Duration::from_secs(1)).max(Duration::from_secs(2))
    }

    /// A claim for this replica starting now.
    fn new_claim(&self) -> Claim {
        let lease = i64::try_from(self.delivery_lease().as_secs()).unwrap_or(i64::MAX / 2);
        Claim {
            owner: self.replicas.id().to_string(),
            until_unix: now_unix().saturating_add(lease),
        }
    }

    /// The signature scheme of connector `slug`, or `404` when no installed connector of
    /// that slug takes webhooks (checked before a body is read).
    pub(crate) fn accepts(
        &self,
        slug: &str,
    ) -> HostResult<connector_model::connector::WebhookSchemeName> {
        let connector = self.state.registry().get(slug).ok_or_else(|| {
            HostError::not_found(format!(
                "no connector `{}` is installed",
                connector_model::ids::truncate(slug, 80)
            ))
        })?;
        connector
            .info()
            .webhook
            .as_ref()
            .map(|w| w.scheme)
            .ok_or_else(|| HostError::not_found(format!("connector `{slug}` takes no webhooks")))
    }

    /// Claims and finishes deliveries nobody is working on; returns how many it claimed.
    pub(crate) async fn sweep(self: &Arc<Self>) -> HostResult<usize> {
        let batch = self.claim_batch(ClaimScope::Sweep).await?;
        let n = batch.len();
        if n > 0 {
            let this = Arc::clone(self);
            tokio::spawn(async move { this.process_claimed(batch).await });
        }
        Ok(n)
    }

    /// Claims one batch of deliveries per `scope` — no more than are processed at once,
    /// so no claim lapses while its delivery waits its turn — with the state refreshed,
    /// so they are routed with the bindings in force now, not as of the last request
    /// this replica happened to serve.
    async fn claim_batch(&self, scope: ClaimScope) -> HostResult<Vec<DeliveryRecord>> {
        let claimed = self
            .store
            .claim_deliveries(&self.new_claim(), now_unix(), scope, CLAIM_BATCH)
            .await?;
        if !claimed.is_empty() {
            self.replicas.refresh().await?;
        }
        Ok(claimed)
    }

    /// Finishes a claimed batch, all of it at once (a slow delivery does not hold up the
    /// others).
    async fn process_claimed(&self, batch: Vec<DeliveryRecord>) {
        futures::future::join_all(batch.into_iter().map(|record| async move {
            let _ = self
                .process_delivery(record, &DeliveryAudit::by(Actor::host()))
                .await;
        }))
        .await;
    }

    /// Sweeps every [`SWEEP_INTERVAL`] until the worker is dropped.
    pub(crate) fn spawn_sweeper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(SWEEP_INTERVAL).await;
                let Some(this) = weak.upgrade() else { return };
                match this.sweep().await {
                    Ok(n) => {
                        if n > 0 {
                            tracing::info!(
                                deliveries = n,
                                "finishing webhook deliveries nobody was working on"
                            );
                        }
                        failing = false;
                    }
                    Err(e) if !failing => {
                        tracing::warn!(error = %e, "cannot sweep stored webhook deliveries");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        });
    }

    /// Receives one webhook delivery for connector `slug`.
    pub(crate) async fn receive(
        self: &Arc<Self>,
        slug: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> HostResult<WebhookOutcome> {
        let span = connector_trace::span("webhook receive")
            .attr_with("connector", || truncate(slug, 128))
            .start();
        let received = self
            .receive_traced(slug, headers, body)
            .in_span(span.clone())
            .await;
        if let Ok(outcome) = &received {
            span.record(
                "status",
                connector_trace::Value::Static(outcome.status.as_str()),
            );
        }
        received
    }

    /// [`Self::receive`] inside its span.
    async fn receive_traced(
        self: &Arc<Self>,
        slug: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> HostResult<WebhookOutcome> {
        let scheme = self.accepts(slug)?;
        let secrets = self.config.connector(slug).webhook_secrets;
        let now = now_unix();
        let verified = verify::verify(scheme, &secrets, headers, body, now).map_err(refusal)?;
        if verified.delivery_id.len() > 200 {
            return Err(HostError::invalid_request(
                "the delivery id is longer than 200 characters",
            ));
        }
        if verified.event.as_deref() == Some("ping") {
            return Ok(WebhookOutcome {
                delivery: verified.delivery_id,
                status: WebhookStatus::Ignored,
                routed_to: Vec::new(),
            });
        }
        let record = DeliveryRecord {
            connector: slug.to_string(),
            delivery_id: verified.delivery_id.clone(),
            event: verified.event,
            headers: stored_headers(headers),
            body: body.to_vec(),
            received_unix: now,
            received_at: now_rfc3339(),
            status: DeliveryStatus::Pending,
            attempts: 0,
            error: None,
            routed_to: Vec::new(),
            claimed_by: None,
            claim_until: 0,
        };
        // Routed first, then stored with its outcome in one transaction: the answer waits
        // for that commit, so a crash before it loses nothing (nothing was acknowledged;
        // the sender sends again). Routing past the inline window stores the delivery as
        // pending first and answers `queued`. The work runs in its own task, so a sender
        // that hangs up does not cut it short.
        let (window_over, window_over_rx) = tokio::sync::oneshot::channel();
        let (answer_tx, answer) = tokio::sync::oneshot::channel();
        let this = Arc::clone(self);
        tokio::spawn(
            async move {
                this.route_and_store(record, window_over_rx, answer_tx)
                    .await
            }
            .in_span(connector_trace::Span::current()),
        );
        let mut answer = std::pin::pin!(answer);
        let outcome = match tokio::time::timeout(INLINE_ROUTING, &mut answer).await {
            Ok(outcome) => outcome,
            Err(_) => {
                let _ = window_over.send(());
                answer.await
            }
        };
        outcome.map_err(|_| HostError::internal("the webhook delivery task failed"))?
    }

    /// The work behind [`Self::receive`] once a delivery is verified: routes it and stores
    /// it done with its messages (one transaction), or — when `window_over` fires first —
    /// stores it pending, answers `queued`, and then finishes it as a stored delivery.
    /// The outcome goes to `answer` as soon as it is known.
    async fn route_and_store(
        self: Arc<Self>,
        record: DeliveryRecord,
        window_over: tokio::sync::oneshot::Receiver<()>,
        answer: tokio::sync::oneshot::Sender<HostResult<WebhookOutcome>>,
    ) {
        let delivery = record.delivery_id.clone();
        let sender = DeliveryAudit::by(Actor::webhook(&record.connector));
        let outcome = |status, routed_to| WebhookOutcome {
            delivery: delivery.clone(),
            status,
            routed_to,
        };
        // The receiver going away (its request was dropped) is not the window closing.
        let window_over = async {
            if window_over.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let routing = self.route_delivery_traced(&record);
        let mut routing = std::pin::pin!(routing);
        let routed = tokio::select! {
            biased;
            routed = &mut routing => Some(routed),
            () = window_over => None,
        };
        let error = match routed {
            Some(Ok((messages, routed_to))) => {
                let audit = sender.entry(
                    &record.connector,
                    &record.delivery_id,
                    WebhookStatus::Accepted,
                    &routed_to,
                );
                let stored = self
                    .store
                    .insert_routed_delivery(
                        &record,
                        &messages,
                        &routed_to,
                        DEDUP_WINDOW_SECS,
                        Some(&audit),
                    )
                    .in_span(inbox_span(messages.len()))
                    .await;
                match stored {
                    Ok(Some(stored)) => {
                        self.inbox.publish(stored);
                        let _ = answer.send(Ok(outcome(WebhookStatus::Accepted, routed_to)));
                        return;
                    }
                    Ok(None) => {
                        let _ = answer.send(Ok(outcome(WebhookStatus::Duplicate, Vec::new())));
                        return;
                    }
                    // The database is away: not acknowledged (`503`), the sender retries.
                    Err(e @ connector_store::StoreError::Unavailable(_)) => {
                        let _ = answer.send(Err(e.into()));
                        return;
                    }
                    // Anything else would fail the same way again: kept failed, visible,
                    // as below.
                    Err(e) => e.to_string(),
                }
            }
            Some(Err(error)) => error.to_string(),
            None => {
                // The window closed first: acknowledged once stored, finished below
                // (this replica's claim keeps the sweeps off it meanwhile).
                let stored = self.store_pending(&record, &sender).await;
                let go_on = matches!(stored, Ok(true));
                let _ = answer.send(stored.map(|stored| match stored {
                    true => outcome(WebhookStatus::Queued, Vec::new()),
                    false => outcome(WebhookStatus::Duplicate, Vec::new()),
                }));
                if !go_on {
                    return;
                }
                let Some(_in_flight) = InFlight::begin(&self.in_flight, &record) else {
                    return;
                };
                let _ = self.finish_stored(&record, routing.await, &sender).await;
                return;
            }
        };
        // Routing (or storing its outcome) failed: kept, failed and visible, for a retry on
        // start or on request.
        let stored = self.store_pending(&record, &sender).await;
        if matches!(stored, Ok(true)) {
            let _ = self.record_failure(&record, error).await;
        }
        let _ = answer.send(stored.map(|stored| match stored {
            true => outcome(WebhookStatus::Queued, Vec::new()),
            false => outcome(WebhookStatus::Duplicate, Vec::new()),
        }));
    }

    /// Stores `record` pending under this replica's claim, with its `delivery.queued`
    /// record as `audit` says (so it precedes whatever record finishing it writes);
    /// `false` if it is a duplicate.
    async fn store_pending(
        &self,
        record: &DeliveryRecord,
        audit: &DeliveryAudit,
    ) -> HostResult<bool> {
        let queued = audit.entry(
            &record.connector,
            &record.delivery_id,
            WebhookStatus::Queued,
            &[],
        );
        Ok(self
            .store
            .insert_delivery(record, DEDUP_WINDOW_SECS, &self.new_claim(), Some(&queued))
            .await?)
    }

    /// Translates and routes a stored delivery; returns the units that got messages.
    /// Failures are recorded on the delivery; a routed delivery is recorded in the audit
    /// log as `audit` says.
    pub(crate) async fn process_delivery(
        &self,
        record: DeliveryRecord,
        audit: &DeliveryAudit,
    ) -> Result<Vec<String>, DeliveryError> {
        let Some(_in_flight) = InFlight::begin(&self.in_flight, &record) else {
            return Err(DeliveryError::InFlight);
        };
        let routed = self.route_delivery_traced(&record).await;
        self.finish_stored(&record, routed, audit).await
    }

    /// Completes a stored delivery with its routing (messages, the delivery marked done and
    /// its audit record, in one transaction), or records the routing's failure on it.
    async fn finish_stored(
        &self,
        record: &DeliveryRecord,
        routed: Result<(Vec<MessageRecord>, Vec<String>), RouteFailure>,
        audit: &DeliveryAudit,
    ) -> Result<Vec<String>, DeliveryError> {
        let outcome = match routed {
            Ok((messages, routed_to)) => match self
                .store
                .complete_delivery(
                    &record.connector,
                    &record.delivery_id,
                    &messages,
                    &routed_to,
                    Some(&audit.entry(
                        &record.connector,
                        &record.delivery_id,
                        WebhookStatus::Accepted,
                        &routed_to,
                    )),
                )
                .in_span(inbox_span(messages.len()))
                .await
            {
                Ok(Some(stored)) => {
                    self.inbox.publish(stored);
                    Ok(routed_to)
                }
                Ok(None) => Err(DeliveryError::AlreadyDone),
                // The database is away: the delivery stays pending under this replica's
                // claim and is retried once the claim lapses.
                Err(e @ connector_store::StoreError::Unavailable(_)) => {
                    Err(DeliveryError::StoreUnavailable(e))
                }
                // Anything else would fail the same way again: keep it failed, visible.
                Err(e) => Err(self.record_failure(record, e.to_string()).await),
            },
            Err(error) => Err(self.record_failure(record, error.to_string()).await),
        };
        outcome
    }

    /// Marks a delivery failed with `error` (kept, visible, retried on start or request)
    /// and hands the error back.
    async fn record_failure(&self, record: &DeliveryRecord, error: String) -> DeliveryError {
        // The delivery id comes from a header and the error from the guest: escaped so
        // neither can forge a log line.
        tracing::warn!(
            connector = %record.connector,
            delivery = %connector_model::ids::escape_controls(&record.delivery_id),
            error = %connector_model::ids::escape_controls(&error),
            "webhook delivery failed; kept for retry"
        );
        if let Err(e) = self
            .store
            .fail_delivery(&record.connector, &record.delivery_id, &error)
            .await
        {
            tracing::error!(error = %e, "could not record a failed delivery");
        }
        DeliveryError::Failed(error)
    }

    async fn route_delivery_traced(
        &self,
        record: &DeliveryRecord,
    ) -> Result<(Vec<MessageRecord>, Vec<String>), RouteFailure> {
        self.route_delivery(record)
            .in_span(connector_trace::span("webhook route").start())
            .await
    }

    async fn route_delivery(
        &self,
        record: &DeliveryRecord,
    ) -> Result<(Vec<MessageRecord>, Vec<String>), RouteFailure> {
        let connector = self
            .state
            .registry()
            .get(&record.connector)
            .ok_or_else(|| RouteFailure::Uninstalled(record.connector.clone()))?;
        let hook = wit::Webhook {
            headers: record.headers.clone(),
            body: record.body.clone(),
        };
        let caller = Caller::Webhooks(Arc::from(record.connector.as_str()));
        let sandbox = self
            .catalog
            .sandbox(&record.connector, None)
            .for_caller(caller.clone());
        let runtime = self.catalog.runtime();
        let component = connector
            .component(runtime.limits().call_timeout)
            .await
            .map_err(RouteFailure::Translate)?;
        let translated = runtime
            .translate_webhook(component, &sandbox, hook)
            .await
            .map_err(RouteFailure::Translate)?
            .map_err(RouteFailure::Refused)?;
        let mut messages = Vec::new();
        let mut routed_to: Vec<String> = Vec::new();
        for message in translated {
            let targets: Vec<_> = self
                .state
                .directory()
                .route(&record.connector, &message.route)
                .cloned()
                .collect();
            let payload: Value =
                serde_json::from_str(&message.payload).map_err(RouteFailure::PayloadNotJson)?;
            for binding in targets {
                let sandbox = self
                    .catalog
                    .sandbox(&record.connector, Some(&binding))
                    .for_caller(caller.clone());
                let wit_binding = wit::Binding {
                    unit: binding.unit_id.clone(),
                    config: binding.config.to_string(),
                };
                let accepted = runtime
                    .accept(component, &sandbox, wit_binding, message.clone())
                    .await
                    .map_err(RouteFailure::Accept)?;
                if !accepted {
                    continue;
                }
                if !routed_to.contains(&binding.unit_id) {
                    routed_to.push(binding.unit_id.clone());
                }
                messages.push(MessageRecord {
                    seq: 0,
                    id: message_id(),
                    unit_id: binding.unit_id.clone(),
                    connector: record.connector.clone(),
                    kind: message.kind.clone(),
                    delivery_id: record.delivery_id.clone(),
                    thread_key: message.thread_key.clone(),
                    payload: payload.clone(),
                    received_at: record.received_at.clone(),
                });
            }
        }
        Ok((messages, routed_to))
    }

    /// Claims every delivery that was stored but not done — this replica's own from before
    /// a restart, and any nobody holds (failed ones included) — and finishes them in the
    /// background. Returns how many the first batch claimed (0: nothing was left over).
    pub(crate) async fn resume(self: &Arc<Self>) -> HostResult<usize> {
        // The first batch is claimed now (a database error fails the start); the rest in
        // the background, a batch at a time, so no claim lapses while its delivery waits.
        let first = self.claim_batch(ClaimScope::Startup).await?;
        let n = first.len();
        if n == 0 {
            return Ok(0);
        }
        tracing::info!("finishing webhook deliveries left over from a previous run");
        let this = Arc::clone(self);
        tokio::spawn(async move {
            // A delivery that fails again is released as failed, and a start-up claim
            // takes failed ones: each is tried once per start.
            let mut tried = std::collections::HashSet::new();
            let mut batch = first;
            loop {
                batch.retain(|d| tried.insert((d.connector.clone(), d.delivery_id.clone())));
                if batch.is_empty() {
                    return;
                }
                this.process_claimed(batch).await;
                batch = match this.claim_batch(ClaimScope::Startup).await {
                    Ok(next) => next,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim left-over deliveries; the periodic sweep takes them later");
                        return;
                    }
                };
            }
        });
        Ok(n)
    }

    pub(crate) async fn stored_delivery(
        &self,
        slug: &str,
        delivery_id: &str,
    ) -> HostResult<DeliveryRecord> {
        self.store
            .delivery(slug, delivery_id)
            .await?
            .ok_or_else(|| {
                HostError::not_found(format!(
                    "no delivery `{delivery_id}` is stored for connector `{slug}`"
                ))
            })
    }

    /// Retries one stored delivery now; routed, it is recorded as `audit` says with its
    /// messages.
    pub(crate) async fn retry(
        self: &Arc<Self>,
        slug: &str,
        delivery_id: &str,
        audit: DeliveryAudit,
    ) -> HostResult<WebhookOutcome> {
        let record = self.stored_delivery(slug, delivery_id).await?;
        if record.status == DeliveryStatus::Done {
            return Ok(WebhookOutcome {
                delivery: record.delivery_id,
                status: WebhookStatus::Duplicate,
                routed_to: record.routed_to,
            });
        }
        let delivery = record.delivery_id.clone();
        // Its own task, as for a received delivery: a caller that goes away mid-flight
        // (a client disconnecting drops the request's future) does not cut the work short.
        let this = Arc::clone(self);
        let task = tokio::spawn(
            async move { this.process_delivery(record, &audit).await }
                .in_span(connector_trace::Span::current()),
        );
        let outcome = task.await.map_err(|e| {
            HostError::internal(format!("the retry task failed: {e}")).with_source(e)
        })?;
        match outcome {
            Ok(routed_to) => Ok(WebhookOutcome {
                delivery,
                status: WebhookStatus::Accepted,
                routed_to,
            }),
            // Finished by another worker while this retry routed it: as if it had been
            // done when the retry was asked for.
            Err(DeliveryError::AlreadyDone) => Ok(WebhookOutcome {
                delivery,
                status: WebhookStatus::Duplicate,
                routed_to: Vec::new(),
            }),
            Err(e) => Err(HostError::new(ErrorCode::DeliveryFailed, e.to_string()).with_source(e)),
        }
    }

    /// What the operator sees of one delivery.
    pub(crate) async fn delivery(&self, slug: &str, delivery_id: &str) -> HostResult<DeliveryView> {
        let d = self.stored_delivery(slug, delivery_id).await?;
        Ok(DeliveryView {
            connector: d.connector,
            delivery: d.delivery_id,
            event: d.event,
            status: d.status,
            attempts: d.attempts,
            error: d.error,
            routed_to: d.routed_to,
            received_at: d.received_at,
        })
    }

    /// Deletes finished deliveries older than the de-duplication window.
    pub(crate) async fn prune(&self) -> HostResult<u64> {
        let before = now_unix() - DEDUP_WINDOW_SECS;
        Ok(self.store.prune_deliveries(before).await?)
    }
}

/// JSON for a webhook outcome.
pub fn outcome_json(o: &WebhookOutcome) -> Value {
    json!({"delivery": o.delivery, "status": o.status.as_str(), "routedTo": o.routed_to})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> DeliveryRecord {
        DeliveryRecord {
            connector: "acme".into(),
            delivery_id: id.into(),
            event: None,
            headers: Vec::new(),
            body: Vec::new(),
            received_unix: 0,
            received_at: String::new(),
            status: DeliveryStatus::Pending,
            attempts: 0,
            error: None,
            routed_to: Vec::new(),
            claimed_by: None,
            claim_until: 0,
        }
    }

    #[test]
    fn message_ids_sort_by_when_they_were_made_and_never_repeat() {
        let mut ids = Vec::new();
        for _ in 0..50 {
            ids.push(message_id());
            // A new millisecond every few ids: ids of one millisecond differ only in
            // their random part.
            std::thread::sleep(Duration::from_micros(300));
        }
        for id in &ids {
            assert!(id.starts_with("msg_") && id.len() == 4 + 12 + 16, "{id}");
        }
        for pair in ids.windows(2) {
            let (earlier, later) = (&pair[0][..16], &pair[1][..16]);
            assert!(earlier <= later, "{} was made before {}", pair[0], pair[1]);
        }
        let first_ms = &ids[0][..16];
        assert!(
            ids.iter().any(|id| &id[..16] > first_ms),
            "the time part moves on"
        );
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }

    #[test]
    fn only_allow_listed_headers_are_kept() {
        for kept in [
            "content-type",
            "user-agent",
            "x-github-event",
            "x-github-delivery",
            "x-hub-signature-256",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "x-request-id",
        ] {
            assert!(is_stored_header(kept), "{kept}");
        }
        for dropped in [
            "authorization",
            "cookie",
            "proxy-authorization",
            "host",
            "x-api-key",
            "x-auth-token",
            "x-forwarded-for",
            "x-real-ip",
            "forwarded",
        ] {
            assert!(!is_stored_header(dropped), "{dropped}");
        }
    }

    const MIB: u64 = 1024 * 1024;

    fn peer(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    fn told(cut: &tokio::sync::Notify) -> bool {
        futures::FutureExt::now_or_never(cut.notified()).is_some()
    }

    #[tokio::test]
    async fn an_address_alone_takes_the_whole_budget_and_gives_way_to_another() {
        let reading = Reading::new(100 * MIB, WAIT_FOR_ROOM);
        let (a1, a1_cut) = reading.enter("github", peer(1));
        let (a2, a2_cut) = reading.enter("github", peer(1));
        assert!(reading.take(a1, 60 * MIB).await);
        assert!(reading.take(a2, 40 * MIB).await);
        // Another address: the budget is full, its sender within its share: the first
        // address, past its share now (50 MiB), loses its largest body at once.
        let (b, b_cut) = reading.enter("github", peer(2));
        assert!(reading.take(b, MIB).await);
        assert!(told(&a1_cut) && !told(&a2_cut) && !told(&b_cut));
        assert!(!reading.take(a1, 61 * MIB).await, "cut off for good");
        assert!(reading.take(a2, 41 * MIB).await, "within its share");
        // Past its own share, the sender's body is cut, not another's.
        assert!(!reading.take(a2, 51 * MIB).await);
        assert!(told(&a2_cut) && !told(&b_cut));
        reading.leave(a1);
        reading.leave(a2);
        assert!(
            reading.take(b, 100 * MIB).await,
            "alone again: the whole budget"
        );
        reading.leave(b);
        let bodies = reading.bodies.lock();
        assert_eq!(bodies.used, 0);
        assert!(bodies.each.is_empty() && bodies.connectors.is_empty());
    }

    #[tokio::test]
    async fn connectors_share_the_budget_then_addresses_their_connectors_part() {
        let reading = Reading::new(100 * MIB, WAIT_FOR_ROOM);
        let (a, a_cut) = reading.enter("github", peer(1));
        assert!(reading.take(a, 100 * MIB).await);
        let (b, _) = reading.enter("hostile", peer(2));
        assert!(reading.take(b, 10 * MIB).await);
        assert!(told(&a_cut), "github's part is half the budget now");
        // github's half, shared by two addresses.
        let (c, _) = reading.enter("github", peer(3));
        let (d, _) = reading.enter("github", peer(4));
        assert!(reading.take(c, 16 * MIB).await);
        // A third of 50 MiB: the first address, cut off, counts until its answer is out.
        assert!(!reading.take(d, 17 * MIB).await);
        // An unknown address shares its connector's part with everyone sending to it.
        let (e, _) = reading.enter("hostile", None);
        assert!(reading.take(e, 40 * MIB).await);
        assert!(!reading.take(e, 41 * MIB).await);
    }

    /// On tokio's paused clock: the waits are the reader's own timers, measured exactly
    /// whatever else loads the machine.
    #[tokio::test(start_paused = true)]
    async fn a_body_within_its_share_waits_a_bounded_time_for_room() {
        const WAIT: Duration = Duration::from_millis(500);
        let reading = Arc::new(Reading::new(100 * MIB, WAIT));
        // An unknown address and a known one on the same connector: within their
        // shares, together more than the budget.
        let (unknown, _) = reading.enter("github", None);
        assert!(reading.take(unknown, 50 * MIB).await);
        let (a, _) = reading.enter("github", peer(1));
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn({
            let reading = reading.clone();
            async move { reading.take(a, 60 * MIB).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "no room yet");
        reading.leave(unknown);
        assert!(waiting.await.expect("task"), "room came");
        assert!(started.elapsed() < WAIT);

        let (unknown, _) = reading.enter("github", None);
        assert!(reading.take(unknown, 40 * MIB).await);
        let started = tokio::time::Instant::now();
        assert!(!reading.take(a, 61 * MIB).await, "no room came");
        assert!(started.elapsed() >= WAIT);
    }

    #[test]
    fn an_in_flight_mark_is_exclusive_and_released_on_drop() {
        let set = InFlightSet::default();
        let first = InFlight::begin(&set, &record("d1")).expect("the first mark");
        // A second attempt is refused and leaves the first one's mark in place.
        assert!(InFlight::begin(&set, &record("d1")).is_none());
        assert!(InFlight::begin(&set, &record("d1")).is_none());
        let other = InFlight::begin(&set, &record("d2")).expect("another delivery");
        assert_eq!(set.lock().len(), 2);
        drop(first);
        assert_eq!(set.lock().len(), 1);
        assert!(InFlight::begin(&set, &record("d1")).is_some());
        drop(other);
        assert!(set.lock().is_empty());
    }
}
