//! Inbound webhooks: verify, store, de-duplicate, translate, route, deliver.
//!
//! The pipeline is built so that a delivery is never lost and never delivered twice:
//!
//! 1. The signature is verified over the raw bytes ([`verify`]) before anything else.
//! 2. The delivery is stored (one transaction) before it is acknowledged; a delivery id
//!    already stored for the connector within the window is answered `duplicate`.
//! 3. The connector's `translate-webhook` turns it into messages; each names a routing
//!    key that is looked up in the directory's key → bindings index (one lookup, however
//!    many bindings exist), and each matching binding's `accept` filter decides.
//! 4. The messages are appended to the units' inboxes and the delivery is marked done in
//!    one transaction, which refuses to run twice for the same delivery.
//!
//! Routing runs inline for up to two seconds; past that the answer is `queued` and the
//! work finishes in the background. Every stored delivery carries a claim of the replica
//! working on it ([`crate::replicas`]); anything not done when a process dies is picked up
//! at its next start, or by any replica once the claim lapses; a failed translation is
//! kept, visible, and retried on start or on request.

pub mod verify;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use crate::error::{ErrorCode, HostError, HostResult};
use crate::host::{now_rfc3339, Host};
use crate::runtime::wit;
use crate::store::{ClaimScope, DeliveryRecord, DeliveryStatus, MessageRecord};

/// How long a webhook request waits for routing before answering `queued`.
pub const INLINE_ROUTING: Duration = Duration::from_secs(2);
/// How often a live inbox stream re-reads a shared database for other replicas' messages.
const SHARED_INBOX_POLL: Duration = Duration::from_millis(250);
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

/// The contract's `Message` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub id: String,
    pub unit_id: String,
    pub connector: String,
    pub kind: String,
    pub delivery_id: String,
    pub thread_key: Option<String>,
    pub payload: Value,
    pub received_at: String,
    /// The inbox cursor (also the SSE event id).
    #[serde(skip)]
    pub cursor: i64,
}

impl From<&MessageRecord> for Message {
    fn from(m: &MessageRecord) -> Self {
        Self {
            id: m.id.clone(),
            unit_id: m.unit_id.clone(),
            connector: m.connector.clone(),
            kind: m.kind.clone(),
            delivery_id: m.delivery_id.clone(),
            thread_key: m.thread_key.clone(),
            payload: m.payload.clone(),
            received_at: m.received_at.clone(),
            cursor: m.seq,
        }
    }
}

/// A page of a unit's inbox.
#[derive(Debug, Clone, Serialize)]
pub struct MessagePage {
    pub messages: Vec<Message>,
    pub next: String,
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

fn parse_cursor(cursor: Option<&str>) -> HostResult<i64> {
    match cursor {
        None | Some("") => Ok(0),
        Some(c) => c.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            HostError::invalid_request(format!(
                "`{c}` is not a message cursor (use the `next` of a previous page)"
            ))
        }),
    }
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

impl Host {
    /// Receives one webhook delivery for connector `slug`.
    pub async fn receive_webhook(
        &self,
        slug: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> HostResult<WebhookOutcome> {
        let connector =
            self.inner.registry.get(slug).ok_or_else(|| {
                HostError::not_found(format!("no connector `{slug}` is installed"))
            })?;
        let scheme = connector
            .info()
            .webhook
            .as_ref()
            .map(|w| w.scheme)
            .ok_or_else(|| HostError::not_found(format!("connector `{slug}` takes no webhooks")))?;
        let secrets = self.inner.config.connector(slug).webhook_secrets;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let verified = verify::verify(scheme, &secrets, headers, body, now).map_err(|e| {
            if e.is_authentication() {
                HostError::new(ErrorCode::InvalidSignature, e.to_string())
            } else {
                HostError::invalid_request(e.to_string())
            }
        })?;
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
            headers: headers
                .iter()
                .filter_map(|(k, v)| {
                    Some((
                        k.as_str().to_ascii_lowercase(),
                        v.to_str().ok()?.to_string(),
                    ))
                })
                .collect(),
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
        // Stored with this replica's claim: no other replica sweeps it up while the
        // inline routing below is under way.
        let claim = self.new_claim();
        if !self
            .inner
            .store
            .insert_delivery(&record, DEDUP_WINDOW_SECS, &claim)
            .await?
        {
            return Ok(WebhookOutcome {
                delivery: record.delivery_id,
                status: WebhookStatus::Duplicate,
                routed_to: Vec::new(),
            });
        }
        let delivery = record.delivery_id.clone();
        let host = self.clone();
        let mut task = tokio::spawn(async move { host.process_delivery(record).await });
        match tokio::time::timeout(INLINE_ROUTING, &mut task).await {
            Ok(Ok(Ok(routed_to))) => Ok(WebhookOutcome {
                delivery,
                status: WebhookStatus::Accepted,
                routed_to,
            }),
            // Failed: stored and marked failed, retried on start or on request.
            Ok(Ok(Err(_))) | Ok(Err(_)) | Err(_) => Ok(WebhookOutcome {
                delivery,
                status: WebhookStatus::Queued,
                routed_to: Vec::new(),
            }),
        }
    }

    /// Translates and routes a stored delivery; returns the units that got messages.
    /// Failures are recorded on the delivery.
    pub(crate) async fn process_delivery(
        &self,
        record: DeliveryRecord,
    ) -> Result<Vec<String>, DeliveryError> {
        let Some(_in_flight) = InFlight::begin(&self.inner.in_flight, &record) else {
            return Err(DeliveryError::InFlight);
        };
        let result = self.route_delivery(&record).await;
        let outcome = match result {
            Ok((messages, routed_to)) => match self
                .inner
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
                    for m in stored {
                        let _ = self.inner.inbox.send(Arc::new(m));
                    }
                    Ok(routed_to)
                }
                Ok(None) => Ok(routed_to),
                // The database is away: the delivery stays pending under this replica's
                // claim and is retried once the claim lapses.
                Err(e @ crate::store::StoreError::Unavailable(_)) => {
                    Err(DeliveryError::StoreUnavailable(e.to_string()))
                }
                // Anything else would fail the same way again: keep it failed, visible.
                Err(e) => Err(self.record_failure(&record, e.to_string()).await),
            },
            Err(error) => Err(self.record_failure(&record, error).await),
        };
        outcome
    }

    /// Marks a delivery failed with `error` (kept, visible, retried on start or request)
    /// and hands the error back.
    async fn record_failure(&self, record: &DeliveryRecord, error: String) -> DeliveryError {
        tracing::warn!(connector = %record.connector, delivery = %record.delivery_id, %error, "webhook delivery failed; kept for retry");
        if let Err(e) = self
            .inner
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
        let connector =
            self.inner.registry.get(&record.connector).ok_or_else(|| {
                format!("connector `{}` is no longer installed", record.connector)
            })?;
        let hook = wit::Webhook {
            headers: record.headers.clone(),
            body: record.body.clone(),
        };
        let sandbox = self.sandbox(&record.connector, None);
        let translated = self
            .inner
            .runtime
            .translate_webhook(connector.component(), &sandbox, hook)
            .await
            .map_err(|e| format!("translate-webhook: {e}"))?
            .map_err(|e| format!("the connector refused the delivery: {e}"))?;
        let mut messages = Vec::new();
        let mut routed_to: Vec<String> = Vec::new();
        for message in translated {
            let targets: Vec<_> = self
                .inner
                .directory
                .read()
                .route(&record.connector, &message.route)
                .cloned()
                .collect();
            let payload: Value = serde_json::from_str(&message.payload)
                .map_err(|e| format!("the connector produced a payload that is not JSON: {e}"))?;
            for binding in targets {
                let sandbox = self.sandbox(&record.connector, Some(&binding));
                let wit_binding = wit::Binding {
                    unit: binding.unit_id.clone(),
                    config: binding.config.to_string(),
                };
                let accepted = self
                    .inner
                    .runtime
                    .accept(
                        connector.component(),
                        &sandbox,
                        wit_binding,
                        message.clone(),
                    )
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
    pub async fn resume_deliveries(&self) -> HostResult<usize> {
        // The first batch is claimed now (a database error fails the start); the rest in
        // the background, a batch at a time, so no claim lapses while its delivery waits.
        let first = self.claim_batch(ClaimScope::Startup).await?;
        let n = first.len();
        if n == 0 {
            return Ok(0);
        }
        tracing::info!("finishing webhook deliveries left over from a previous run");
        let host = self.clone();
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
                host.process_claimed(batch).await;
                batch = match host.claim_batch(ClaimScope::Startup).await {
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
        self.inner
            .store
            .delivery(slug, delivery_id)
            .await?
            .ok_or_else(|| {
                HostError::not_found(format!(
                    "no delivery `{delivery_id}` is stored for connector `{slug}`"
                ))
            })
    }

    /// Retries one stored delivery now.
    pub async fn retry_delivery(
        &self,
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
        let host = self.clone();
        let task = tokio::spawn(async move { host.process_delivery(record).await });
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
    pub async fn delivery(&self, slug: &str, delivery_id: &str) -> HostResult<DeliveryView> {
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

    /// A page of a unit's inbox after `cursor`.
    pub async fn messages(
        &self,
        unit: &str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> HostResult<MessagePage> {
        crate::host::check_id("unit", unit)?;
        if self.inner.directory.read().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        let after = parse_cursor(cursor)?;
        let limit = limit.unwrap_or(100);
        if limit == 0 || limit > 500 {
            return Err(HostError::invalid_request(
                "`limit` must be between 1 and 500",
            ));
        }
        let records = self.inner.store.messages(unit, after, limit).await?;
        let next = records.last().map(|m| m.seq).unwrap_or(after).to_string();
        Ok(MessagePage {
            messages: records.iter().map(Message::from).collect(),
            next,
        })
    }

    /// A live subscription to a unit's inbox: every message after `cursor` (stored ones
    /// first, then new ones as they arrive), each exactly once, in order.
    pub fn subscribe(
        &self,
        unit: &str,
        cursor: Option<&str>,
    ) -> HostResult<impl Stream<Item = Message> + Send + 'static> {
        crate::host::check_id("unit", unit)?;
        if self.inner.directory.read().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        let after = parse_cursor(cursor)?;
        // Subscribe before reading the backlog so nothing falls between the two.
        let mut live = self.inner.inbox.subscribe();
        let store = self.inner.store.clone();
        // On a shared database other replicas append too: the store is the only source
        // (read again on a local message and at least every `SHARED_INBOX_POLL`), since a
        // message from this replica may carry a larger cursor than one another replica
        // committed just before it.
        let shared = store.is_shared();
        let unit = unit.to_string();
        Ok(async_stream(move |tx| async move {
            let mut last = after;
            loop {
                // Backlog (also after a lagging receiver): read the store from `last`.
                loop {
                    let page = match store.messages(&unit, last, 500).await {
                        Ok(p) => p,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                    };
                    if page.is_empty() {
                        break;
                    }
                    for m in &page {
                        last = m.seq;
                        if tx.send(Message::from(m)).await.is_err() {
                            return;
                        }
                    }
                }
                loop {
                    if shared {
                        match tokio::time::timeout(SHARED_INBOX_POLL, live.recv()).await {
                            Err(_) | Ok(Ok(_)) | Ok(Err(RecvError::Lagged(_))) => break,
                            Ok(Err(RecvError::Closed)) => return,
                        }
                    }
                    match live.recv().await {
                        Ok(m) => {
                            if m.unit_id != unit || m.seq <= last {
                                continue;
                            }
                            last = m.seq;
                            if tx.send(Message::from(&*m)).await.is_err() {
                                return;
                            }
                        }
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return,
                    }
                }
            }
        }))
    }

    /// Deletes finished deliveries older than the de-duplication window.
    pub async fn prune_deliveries(&self) -> HostResult<u64> {
        let before = time::OffsetDateTime::now_utc().unix_timestamp() - DEDUP_WINDOW_SECS;
        Ok(self.inner.store.prune_deliveries(before).await?)
    }
}

/// A stream fed by a producer task through a bounded channel; the task stops when the
/// stream is dropped.
fn async_stream<F, Fut>(producer: F) -> impl Stream<Item = Message> + Send + 'static
where
    F: FnOnce(tokio::sync::mpsc::Sender<Message>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(producer(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
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
