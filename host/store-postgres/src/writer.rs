//! The PostgreSQL store's group commit of routed deliveries
//! ([`DeliveryQueue::insert_routed_delivery`](connector_store::DeliveryQueue::insert_routed_delivery)).
//!
//! Why: messages are appended under the inbox lock, held to the commit so that cursor
//! order is commit order (see the crate docs). One delivery per transaction makes
//! every WAL flush a turn of that lock: the replicas' webhook throughput was one flush per
//! delivery. Here one task per store handle stores the routed deliveries waiting at that
//! moment in one transaction — one multi-row insert of the deliveries, one of their
//! messages, one turn of the lock, one flush — so the lock is taken once per group.
//!
//! The guarantees are those of one transaction per delivery:
//! - **Acknowledged only when committed**: each caller's answer is sent after the group's
//!   commit; a failed group stores nothing of any of its deliveries.
//! - **De-duplicated**: the insert keeps the per-row window check of `insert_delivery`
//!   (`ON CONFLICT … WHERE`), so a replica storing the same id at the same moment waits for
//!   the row and finds it; a second copy of an id within one group is a duplicate of the
//!   first. Rows are inserted in key order, so two replicas' groups lock rows in the same
//!   order and never deadlock each other.
//! - **Each delivery all or nothing**: when a group of several fails (for any reason but
//!   no connection to be had), each of its deliveries is tried again on its own, so one
//!   delivery the server refuses cannot fail the others. A group closes at
//!   [`MAX_GROUP`] deliveries or [`GROUP_BYTES`] of bodies, whichever comes first.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use crate::{append_audit, append_messages, map_err};
use connector_model::audit::AuditEntry;
use connector_model::records::{DeliveryRecord, MessageRecord};
use connector_store::encode_json;
use connector_store::{StoreError, StoreResult};

/// The most deliveries one commit takes.
const MAX_GROUP: usize = 256;
/// The most body bytes one group's statement carries (PostgreSQL refuses a value past
/// 1 GB): a group closes before a delivery that would take it past this, and a larger
/// delivery goes alone.
const GROUP_BYTES: usize = 32 * 1024 * 1024;

/// What a routed delivery's caller is answered: its stored messages, or `None` for a
/// duplicate.
pub(crate) type Stored = StoreResult<Option<Vec<MessageRecord>>>;

/// One routed delivery waiting to be stored.
pub(crate) struct RoutedJob {
    pub delivery: DeliveryRecord,
    pub messages: Vec<MessageRecord>,
    pub routed_to: Vec<String>,
    pub window_secs: i64,
    /// Appended to the audit log with the delivery, if it is stored.
    pub audit: Option<AuditEntry>,
    pub reply: oneshot::Sender<Stored>,
}

/// What the writer task shares with its store handle.
pub(crate) struct WriterShared {
    pub pool: Pool,
    pub commits: AtomicU64,
    pub writes: AtomicU64,
}

/// Starts the writer task; it stores jobs sent to the returned channel in groups until
/// every sender is dropped.
pub(crate) fn spawn(shared: Arc<WriterShared>) -> mpsc::UnboundedSender<RoutedJob> {
    let (send, mut receive) = mpsc::unbounded_channel::<RoutedJob>();
    tokio::spawn(async move {
        let mut carried: Vec<RoutedJob> = Vec::new();
        loop {
            if carried.is_empty() {
                match receive.recv().await {
                    Some(job) => carried.push(job),
                    None => return,
                }
            }
            while carried.len() < MAX_GROUP {
                match receive.try_recv() {
                    Ok(job) => carried.push(job),
                    Err(_) => break,
                }
            }
            let split = group_end(&carried);
            let rest = carried.split_off(split);
            let group = std::mem::replace(&mut carried, rest);
            store_group(&shared, group).await;
        }
    });
    send
}

/// How many of `jobs` (at least one) the next group takes: those with the first one's
/// window (the statement takes one value; callers use one anyway), within
/// [`GROUP_BYTES`].
fn group_end(jobs: &[RoutedJob]) -> usize {
    let Some(first) = jobs.first() else {
        return 0;
    };
    let mut bytes = 0usize;
    for (i, job) in jobs.iter().enumerate() {
        bytes = bytes.saturating_add(job.delivery.body.len());
        if i > 0 && (job.window_secs != first.window_secs || bytes > GROUP_BYTES) {
            return i;
        }
    }
    jobs.len()
}

/// Stores `jobs` in one transaction and answers them (see the module docs).
async fn store_group(shared: &WriterShared, jobs: Vec<RoutedJob>) {
    let outcome = try_group(shared, &jobs).await;
    match outcome {
        Ok(answers) => {
            shared.commits.fetch_add(1, Ordering::Relaxed);
            shared
                .writes
                .fetch_add(jobs.len() as u64, Ordering::Relaxed);
            for (job, answer) in jobs.into_iter().zip(answers) {
                let _ = job.reply.send(Ok(answer));
            }
        }
        // No connection to be had (nothing to try one by one either), or a group of one.
        Err(GroupError::NoConnection(e)) => answer_all(jobs, &e),
        Err(GroupError::Failed(e)) if jobs.len() == 1 => answer_all(jobs, &e),
        // One delivery may be what failed the group (a value the server refuses, a
        // statement timeout, a deadlock): each on its own, so only that one fails.
        Err(GroupError::Failed(_)) => {
            for job in jobs {
                let answer = try_group(shared, std::slice::from_ref(&job)).await;
                if answer.is_ok() {
                    shared.commits.fetch_add(1, Ordering::Relaxed);
                    shared.writes.fetch_add(1, Ordering::Relaxed);
                }
                let answer = answer
                    .map(|mut a| a.pop().flatten())
                    .map_err(GroupError::into_inner);
                let _ = job.reply.send(answer);
            }
        }
    }
}

fn answer_all(jobs: Vec<RoutedJob>, e: &StoreError) {
    for job in jobs {
        let _ = job.reply.send(Err(e.clone()));
    }
}

/// Why a group was not stored.
enum GroupError {
    /// No database connection could be had: the database is away.
    NoConnection(StoreError),
    /// The group's transaction failed and was rolled back.
    Failed(StoreError),
}

impl GroupError {
    fn into_inner(self) -> StoreError {
        match self {
            GroupError::NoConnection(e) | GroupError::Failed(e) => e,
        }
    }
}

/// The group's transaction: returns each job's answer, in order.
async fn try_group(
    shared: &WriterShared,
    jobs: &[RoutedJob],
) -> Result<Vec<Option<Vec<MessageRecord>>>, GroupError> {
    let mut conn = shared.pool.get().await.map_err(|e| {
        GroupError::NoConnection(StoreError::Unavailable(format!(
            "insert_routed_delivery: cannot get a database connection ({e}); check that \
             PostgreSQL is running and reachable"
        )))
    })?;
    store_in(&mut conn, jobs).await.map_err(GroupError::Failed)
}

/// The group's statements and commit on `conn`.
async fn store_in(
    conn: &mut deadpool_postgres::Object,
    jobs: &[RoutedJob],
) -> StoreResult<Vec<Option<Vec<MessageRecord>>>> {
    let ctx = "insert_routed_delivery";
    let db = |e| map_err(ctx, e);
    // The first copy of each id is a candidate; later copies are its duplicates.
    let mut seen = HashSet::with_capacity(jobs.len());
    let mut candidates: Vec<usize> = (0..jobs.len())
        .filter(|&i| {
            let d = &jobs[i].delivery;
            seen.insert((d.connector.as_str(), d.delivery_id.as_str()))
        })
        .collect();
    candidates.sort_by(|&a, &b| {
        let (a, b) = (&jobs[a].delivery, &jobs[b].delivery);
        (&a.connector, &a.delivery_id).cmp(&(&b.connector, &b.delivery_id))
    });
    let mut columns: [Vec<String>; 5] = Default::default();
    let mut events: Vec<Option<&str>> = Vec::with_capacity(candidates.len());
    let mut bodies: Vec<&[u8]> = Vec::with_capacity(candidates.len());
    let mut received: Vec<i64> = Vec::with_capacity(candidates.len());
    for &i in &candidates {
        let d = &jobs[i].delivery;
        columns[0].push(d.connector.clone());
        columns[1].push(d.delivery_id.clone());
        columns[2].push(encode_json(ctx, &d.headers)?);
        columns[3].push(d.received_at.clone());
        columns[4].push(encode_json(ctx, &jobs[i].routed_to)?);
        events.push(d.event.as_deref());
        bodies.push(&d.body);
        received.push(d.received_unix);
    }
    let window = jobs.first().map_or(0, |j| j.window_secs);

    let tx = crate::read_committed(conn).await.map_err(db)?;
    let insert = tx
        .prepare_cached(
            "INSERT INTO deliveries (connector, delivery_id, event, headers, body,
                 received_unix, received_at, status, attempts, error, routed_to,
                 claimed_by, claim_until)
             SELECT c, d, e, h, b, r, ra, 'done', 1, NULL, rt, NULL, 0
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[],
                 $6::int8[], $7::text[], $8::text[]) AS t(c, d, e, h, b, r, ra, rt)
             ON CONFLICT (connector, delivery_id) DO UPDATE SET
                 event = excluded.event, headers = excluded.headers, body = excluded.body,
                 received_unix = excluded.received_unix, received_at = excluded.received_at,
                 status = excluded.status, attempts = excluded.attempts,
                 error = excluded.error, routed_to = excluded.routed_to,
                 claimed_by = excluded.claimed_by, claim_until = excluded.claim_until
             WHERE deliveries.received_unix < excluded.received_unix - $9
             RETURNING connector, delivery_id",
        )
        .await
        .map_err(db)?;
    let rows = tx
        .query(
            &insert,
            &[
                &columns[0],
                &columns[1],
                &events,
                &columns[2],
                &bodies,
                &received,
                &columns[3],
                &columns[4],
                &window,
            ],
        )
        .await
        .map_err(db)?;
    let mut inserted = HashSet::with_capacity(rows.len());
    for row in &rows {
        let connector: String = row.try_get(0).map_err(db)?;
        let id: String = row.try_get(1).map_err(db)?;
        inserted.insert((connector, id));
    }
    // The stored ones' messages, in the order their deliveries arrived.
    let mut stored_jobs: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| {
            let d = &jobs[i].delivery;
            inserted.contains(&(d.connector.clone(), d.delivery_id.clone()))
        })
        .collect();
    stored_jobs.sort_unstable();
    let messages: Vec<MessageRecord> = stored_jobs
        .iter()
        .flat_map(|&i| jobs[i].messages.iter().cloned())
        .collect();
    let stored = append_messages(&tx, ctx, &messages).await?;
    // After the inbox lock, as every transaction that takes both does.
    let records = stored_jobs.iter().filter_map(|&i| jobs[i].audit.clone());
    append_audit(&tx, ctx, records.collect()).await?;
    tx.commit().await.map_err(db)?;

    let mut by_id: HashMap<&str, MessageRecord> =
        stored.iter().map(|m| (m.id.as_str(), m.clone())).collect();
    let stored_set: HashSet<usize> = stored_jobs.into_iter().collect();
    Ok((0..jobs.len())
        .map(|i| {
            stored_set.contains(&i).then(|| {
                jobs[i]
                    .messages
                    .iter()
                    .filter_map(|m| by_id.remove(m.id.as_str()))
                    .collect()
            })
        })
        .collect())
}
