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

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use crate::catalog::Catalog;
use crate::config::HostConfig;
use crate::error::{ErrorCode, HostError, HostResult};
use crate::ids::now_rfc3339;
use crate::inbox::Inbox;
use crate::replicas::ReplicaSync;
use crate::runtime::{wit, Caller};
use crate::state::State;
use crate::store::{Claim, Store};
use crate::store::{ClaimScope, DeliveryRecord, DeliveryStatus, MessageRecord};

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

/// The answer to a webhook delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookOutcome {
    pub delivery: String,
    pub status: WebhookStatus,
    pub routed_to: Vec<String>,
}

/// Why processing a stored delivery did not finish it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// Another task on this replica is processing it right now.
    #[error("this delivery is already being processed")]
    InFlight,
    /// The database did not answer: the delivery stays pending under this replica's claim
    /// and is taken up again when the claim lapses.
    #[error("{0}")]
    StoreUnavailable(String),
    /// Translation, routing or storing failed: the delivery is kept `failed` with this
    /// error, visible and retried at the next start or on request.
    #[error("{0}")]
    Failed(String),
}

/// What the operator sees of one delivery.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    pub connector: String,
    pub delivery: String,
    pub event: Option<String>,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub error: Option<String>,
    pub routed_to: Vec<String>,
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
    /// KiB of webhook bodies that may be being read at once (see [`Self::admit`]).
    reading: Arc<tokio::sync::Semaphore>,
}

/// The least of webhook bodies that may be being read at once, whatever
/// `max_webhook_bytes` is; otherwise four of the largest.
const MIN_READING_BYTES: usize = 64 * 1024 * 1024;
/// How long a webhook body may take to arrive in all: senders post a delivery at once,
/// and a body being read holds part of what the host reads at once.
pub const WEBHOOK_BODY_TIME: Duration = Duration::from_secs(30);

/// A delivery admitted to have its body read: as the body arrives, it takes its bytes
/// from what the host reads at once ([`Self::take`]), and gives them back when dropped.
pub struct BodyAdmission {
    reading: Arc<tokio::sync::Semaphore>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
    limit: usize,
}

impl BodyAdmission {
    /// The most the body may hold (`max_webhook_bytes`).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Takes room for a body `seen` bytes long so far (only what arrived is counted, so
    /// a large declared length costs nothing until it is sent); `false` when the bodies
    /// being read already hold what the host reads at once (answer `503 host_busy`).
    pub fn take(&mut self, seen: u64) -> bool {
        let wanted = seen.div_ceil(1024);
        let have = self.held.as_ref().map_or(0, |p| p.num_permits() as u64);
        if wanted <= have {
            return true;
        }
        let Ok(more) = u32::try_from(wanted - have) else {
            return false;
        };
        match self.reading.clone().try_acquire_many_owned(more) {
            Ok(permit) => {
                match &mut self.held {
                    Some(held) => held.merge(permit),
                    None => self.held = Some(permit),
                }
                true
            }
            Err(_) => false,
        }
    }
}

fn now_unix() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
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
        let reading_kib = config
            .max_webhook_bytes
            .saturating_mul(4)
            .max(MIN_READING_BYTES)
            .div_ceil(1024)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            config,
            store,
            state,
            catalog,
            inbox,
            reading: Arc::new(tokio::sync::Semaphore::new(reading_kib)),
            replicas,
            in_flight: InFlightSet::default(),
        }
    }

    /// Admits a delivery's body to be read, or refuses it before anything is buffered:
    /// `404` for a slug that takes no webhooks, `413` for a declared length past
    /// `max_webhook_bytes`, `401`/`400` when its headers cannot
    /// verify (no secret configured, signature missing or malformed, a stale timestamp:
    /// see [`verify::precheck`]). Its body is then read through the admission, which
    /// answers `503 host_busy` once the bodies being read hold four times
    /// `max_webhook_bytes` (at least 64 MiB), so uploads that cannot be verified yet cannot
    /// fill the host's memory.
    pub(crate) fn admit(&self, slug: &str, headers: &http::HeaderMap) -> HostResult<BodyAdmission> {
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
        Ok(BodyAdmission {
            reading: self.reading.clone(),
            held: None,
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
    ) -> HostResult<crate::registry::manifest::WebhookSchemeName> {
        let connector = self.state.registry().get(slug).ok_or_else(|| {
            HostError::not_found(format!(
                "no connector `{}` is installed",
                crate::ids::truncate(slug, 80)
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
            let _ = self.process_delivery(record).await;
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
        tokio::spawn(async move {
            this.route_and_store(record, window_over_rx, answer_tx)
                .await
        });
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
        let routing = self.route_delivery(&record);
        let mut routing = std::pin::pin!(routing);
        let routed = tokio::select! {
            biased;
            routed = &mut routing => Some(routed),
            () = window_over => None,
        };
        let error = match routed {
            Some(Ok((messages, routed_to))) => {
                let stored = self
                    .store
                    .insert_routed_delivery(&record, &messages, &routed_to, DEDUP_WINDOW_SECS)
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
                    Err(e @ crate::store::StoreError::Unavailable(_)) => {
                        let _ = answer.send(Err(e.into()));
                        return;
                    }
                    // Anything else would fail the same way again: kept failed, visible,
                    // as below.
                    Err(e) => e.to_string(),
                }
            }
            Some(Err(error)) => error,
            None => {
                // The window closed first: acknowledged once stored, finished below
                // (this replica's claim keeps the sweeps off it meanwhile).
                let stored = self.store_pending(&record).await;
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
                let _ = self.finish_stored(&record, routing.await).await;
                return;
            }
        };
        // Routing (or storing its outcome) failed: kept, failed and visible, for a retry on
        // start or on request.
        let stored = self.store_pending(&record).await;
        if matches!(stored, Ok(true)) {
            let _ = self.record_failure(&record, error).await;
        }
        let _ = answer.send(stored.map(|stored| match stored {
            true => outcome(WebhookStatus::Queued, Vec::new()),
            false => outcome(WebhookStatus::Duplicate, Vec::new()),
        }));
    }

    /// Stores `record` pending under this replica's claim; `false` if it is a duplicate.
    async fn store_pending(&self, record: &DeliveryRecord) -> HostResult<bool> {
        Ok(self
            .store
            .insert_delivery(record, DEDUP_WINDOW_SECS, &self.new_claim())
            .await?)
    }

    /// Translates and routes a stored delivery; returns the units that got messages.
    /// Failures are recorded on the delivery.
    pub(crate) async fn process_delivery(
        &self,
        record: DeliveryRecord,
    ) -> Result<Vec<String>, DeliveryError> {
        let Some(_in_flight) = InFlight::begin(&self.in_flight, &record) else {
            return Err(DeliveryError::InFlight);
        };
        let routed = self.route_delivery(&record).await;
        self.finish_stored(&record, routed).await
    }

    /// Completes a stored delivery with its routing (messages and the delivery marked done,
    /// in one transaction), or records the routing's failure on it.
    async fn finish_stored(
        &self,
        record: &DeliveryRecord,
        routed: Result<(Vec<MessageRecord>, Vec<String>), String>,
    ) -> Result<Vec<String>, DeliveryError> {
        let outcome = match routed {
            Ok((messages, routed_to)) => match self
                .store
                .complete_delivery(
                    &record.connector,
                    &record.delivery_id,
                    &messages,
                    &routed_to,
                )
                .await
            {
                Ok(Some(stored)) => {
                    self.inbox.publish(stored);
                    Ok(routed_to)
                }
                Ok(None) => Ok(routed_to),
                // The database is away: the delivery stays pending under this replica's
                // claim and is retried once the claim lapses.
                Err(e @ crate::store::StoreError::Unavailable(_)) => {
                    Err(DeliveryError::StoreUnavailable(e.to_string()))
                }
                // Anything else would fail the same way again: keep it failed, visible.
                Err(e) => Err(self.record_failure(record, e.to_string()).await),
            },
            Err(error) => Err(self.record_failure(record, error).await),
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
            delivery = %crate::ids::escape_controls(&record.delivery_id),
            error = %crate::ids::escape_controls(&error),
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

    async fn route_delivery(
        &self,
        record: &DeliveryRecord,
    ) -> Result<(Vec<MessageRecord>, Vec<String>), String> {
        let connector = self
            .state
            .registry()
            .get(&record.connector)
            .ok_or_else(|| format!("connector `{}` is no longer installed", record.connector))?;
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
            .map_err(|e| format!("translate-webhook: {e}"))?;
        let translated = runtime
            .translate_webhook(component, &sandbox, hook)
            .await
            .map_err(|e| format!("translate-webhook: {e}"))?
            .map_err(|e| format!("the connector refused the delivery: {e}"))?;
        let mut messages = Vec::new();
        let mut routed_to: Vec<String> = Vec::new();
        for message in translated {
            let targets: Vec<_> = self
                .state
                .directory()
                .route(&record.connector, &message.route)
                .cloned()
                .collect();
            let payload: Value = serde_json::from_str(&message.payload)
                .map_err(|e| format!("the connector produced a payload that is not JSON: {e}"))?;
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
                    .map_err(|e| format!("accept: {e}"))?;
                if !accepted {
                    continue;
                }
                if !routed_to.contains(&binding.unit_id) {
                    routed_to.push(binding.unit_id.clone());
                }
                messages.push(MessageRecord {
                    seq: 0,
                    id: format!("msg_{}", crate::auth::random_secret(12)),
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

    async fn stored_delivery(&self, slug: &str, delivery_id: &str) -> HostResult<DeliveryRecord> {
        self.store
            .delivery(slug, delivery_id)
            .await?
            .ok_or_else(|| {
                HostError::not_found(format!(
                    "no delivery `{delivery_id}` is stored for connector `{slug}`"
                ))
            })
    }

    /// Retries one stored delivery now.
    pub(crate) async fn retry(
        self: &Arc<Self>,
        slug: &str,
        delivery_id: &str,
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
        let task = tokio::spawn(async move { this.process_delivery(record).await });
        let outcome = task
            .await
            .map_err(|e| HostError::internal(format!("the retry task failed: {e}")))?;
        match outcome {
            Ok(routed_to) => Ok(WebhookOutcome {
                delivery,
                status: WebhookStatus::Accepted,
                routed_to,
            }),
            Err(e) => Err(HostError::new(ErrorCode::DeliveryFailed, e.to_string())),
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
