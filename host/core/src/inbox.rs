//! Units' inboxes: messages routed from webhook deliveries, read by page or followed live.
//!
//! Messages are stored in the transaction that finishes their delivery; [`Inbox::publish`]
//! then wakes the live subscribers on this replica. A live subscription reads the store
//! from its cursor, at the start and again on every wake-up: the store is its only
//! source of messages, since deliveries committed together (or on other replicas) are
//! published in no particular order, and a message published late must not be skipped
//! by a cursor that has already moved past it. So nothing stored before the subscription
//! began is missed, nothing is seen twice, and the order is the cursor order.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use crate::state::State;
use connector_model::error::{HostError, HostResult};
use connector_model::ids::UnitId;
use connector_model::records::MessageRecord;
use connector_store::Store;

/// How often a live inbox stream re-reads a shared database for other replicas' messages.
const SHARED_INBOX_POLL: Duration = Duration::from_millis(250);
/// The contract's `Message` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Its id.
    pub id: String,
    /// The unit whose inbox holds it.
    pub unit_id: String,
    /// The connector that translated it.
    pub connector: String,
    /// What happened (`issue.opened`, ...).
    pub kind: String,
    /// The webhook delivery it came from.
    pub delivery_id: String,
    /// What it belongs to (an issue, a pull request), if anything.
    pub thread_key: Option<String>,
    /// The connector's translation.
    pub payload: Value,
    /// When the delivery arrived (RFC 3339).
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
    /// Oldest first.
    pub messages: Vec<Message>,
    /// The cursor to read after these.
    pub next: String,
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

/// The inboxes of all units.
pub(crate) struct Inbox {
    store: Arc<dyn Store>,
    state: Arc<State>,
    /// Messages stored on this replica, as they are stored.
    live: tokio::sync::broadcast::Sender<Arc<MessageRecord>>,
    /// Whether others append to the store too (other replicas, or `serve` beside a tool
    /// server): then watchers also re-read it.
    others_write: bool,
}

impl Inbox {
    /// `others_write`: messages may be stored by other processes (a shared database, or
    /// a tool server beside `serve`), so live readers also poll the store.
    pub(crate) fn new(store: Arc<dyn Store>, state: Arc<State>, others_write: bool) -> Self {
        Self {
            store,
            state,
            live: tokio::sync::broadcast::channel(4096).0,
            others_write,
        }
    }

    /// Watches the inboxes of `units` from now on: [`MessageWatch::next`] names the units
    /// that received messages since it last answered. It wakes on the same commit signal
    /// as [`Inbox::subscribe`] (at once for messages stored by this process) and, when
    /// others write too, re-reads the store at least every [`SHARED_INBOX_POLL`].
    pub(crate) async fn watch(&self, units: Vec<UnitId>) -> HostResult<MessageWatch> {
        // Subscribe before reading where each inbox ends, so nothing falls between.
        let live = self.live.subscribe();
        let mut seen = HashMap::with_capacity(units.len());
        for unit in units {
            let last = self.store.last_message_cursor(&unit).await?;
            seen.insert(unit.into_string(), last);
        }
        Ok(MessageWatch {
            live,
            store: self.store.clone(),
            poll: self.others_write,
            seen,
            found: Default::default(),
        })
    }

    /// Tells live subscribers on this replica about messages just stored.
    pub(crate) fn publish(&self, stored: Vec<MessageRecord>) {
        for m in stored {
            let _ = self.live.send(Arc::new(m));
        }
    }

    /// A page of a unit's inbox after `cursor`.
    pub(crate) async fn page(
        &self,
        unit: &UnitId,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> HostResult<MessagePage> {
        if self.state.directory().unit(unit).is_none() {
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
        let records = self.store.messages(unit, after, limit).await?;
        let next = records.last().map(|m| m.seq).unwrap_or(after).to_string();
        Ok(MessagePage {
            messages: records.iter().map(Message::from).collect(),
            next,
        })
    }

    /// A unit's messages with a cursor below `before` (the newest when `None`), newest
    /// first, at most `limit` (1 to 500), read backwards from the store's index.
    pub(crate) async fn newest(
        &self,
        unit: &UnitId,
        before: Option<i64>,
        limit: u32,
    ) -> HostResult<Vec<Message>> {
        if self.state.directory().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        if limit == 0 || limit > 500 {
            return Err(HostError::invalid_request(
                "`limit` must be between 1 and 500",
            ));
        }
        let records = self
            .store
            .messages_newest_first(unit, before, limit)
            .await?;
        Ok(records.iter().map(Message::from).collect())
    }

    /// A live subscription to a unit's inbox: every message after `cursor` (stored ones
    /// first, then new ones as they arrive), each exactly once, in order.
    pub(crate) fn subscribe(
        &self,
        unit: &UnitId,
        cursor: Option<&str>,
    ) -> HostResult<impl Stream<Item = Message> + Send + 'static> {
        if self.state.directory().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        let after = parse_cursor(cursor)?;
        // Subscribe before reading the backlog so nothing falls between the two.
        let mut live = self.live.subscribe();
        let store = self.store.clone();
        // On a shared database other replicas append too: the store is the only source
        // (read again on a local message and at least every `SHARED_INBOX_POLL`), since a
        // message from this replica may carry a larger cursor than one another replica
        // committed just before it.
        let shared = self.others_write;
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
                // Wait for a message of this unit stored after `last` (or, on a shared
                // database, for the poll interval), then read the store again.
                loop {
                    let woke = if shared {
                        match tokio::time::timeout(SHARED_INBOX_POLL, live.recv()).await {
                            Err(_) => break,
                            Ok(woke) => woke,
                        }
                    } else {
                        live.recv().await
                    };
                    match woke {
                        Ok(m) if m.unit_id == unit && m.seq > last => break,
                        Ok(_) => continue,
                        Err(RecvError::Lagged(_)) => break,
                        Err(RecvError::Closed) => return,
                    }
                }
                // Everything already waiting is covered by the one read below.
                while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
                    live.try_recv()
                {}
            }
        }))
    }
}

/// Watches some units' inboxes for new messages ([`Inbox::watch`]).
pub struct MessageWatch {
    live: tokio::sync::broadcast::Receiver<Arc<MessageRecord>>,
    store: Arc<dyn Store>,
    poll: bool,
    /// Per unit watched: the newest cursor already seen.
    seen: HashMap<String, i64>,
    /// Units with messages found but not reported yet.
    found: std::collections::BTreeSet<String>,
}

impl MessageWatch {
    /// Waits until one or more watched units received a message newer than any reported
    /// before, and names them (sorted). Pending forever when nothing is watched.
    /// Cancel-safe: what a dropped call had found is kept for the next one.
    pub async fn next(&mut self) -> Vec<String> {
        if self.seen.is_empty() {
            return std::future::pending().await;
        }
        loop {
            if !self.found.is_empty() {
                return std::mem::take(&mut self.found).into_iter().collect();
            }
            let woke = if self.poll {
                tokio::time::timeout(SHARED_INBOX_POLL, self.live.recv())
                    .await
                    .ok()
            } else {
                Some(self.live.recv().await)
            };
            let mut reread = woke.is_none();
            let mut woke = woke;
            // Take everything already waiting, so one burst is one answer.
            loop {
                match woke.take() {
                    Some(Ok(m)) => {
                        if let Some(seen) = self.seen.get_mut(&m.unit_id) {
                            if m.seq > *seen {
                                *seen = m.seq;
                                self.found.insert(m.unit_id.clone());
                            }
                        }
                    }
                    Some(Err(RecvError::Lagged(_))) => reread = true,
                    Some(Err(RecvError::Closed)) => return std::future::pending().await,
                    None => {}
                }
                match self.live.try_recv() {
                    Ok(m) => woke = Some(Ok(m)),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) => {
                        woke = Some(Err(RecvError::Lagged(n)))
                    }
                    Err(_) => break,
                }
            }
            if reread {
                let units: Vec<String> = self.seen.keys().cloned().collect();
                for unit in units {
                    // A failed read is retried at the next round.
                    if let Ok(last) = self.store.last_message_cursor(&unit).await {
                        if let Some(seen) = self.seen.get_mut(&unit) {
                            if last > *seen {
                                *seen = last;
                                self.found.insert(unit);
                            }
                        }
                    }
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_non_negative_numbers() {
        assert_eq!(parse_cursor(None).ok(), Some(0));
        assert_eq!(parse_cursor(Some("")).ok(), Some(0));
        assert_eq!(parse_cursor(Some("42")).ok(), Some(42));
        for bad in ["-1", "x", "1.5", "99999999999999999999"] {
            let err = parse_cursor(Some(bad)).expect_err(bad);
            assert_eq!(err.code, crate::ErrorCode::InvalidRequest);
        }
    }
}
