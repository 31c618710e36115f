//! The PostgreSQL store's group commit of routed deliveries
//! ([`DeliveryQueue::insert_routed_delivery`](crate::store::DeliveryQueue::insert_routed_delivery)).
//!
//! Why: messages are appended under the inbox lock, held to the commit so that cursor
//! order is commit order (see [`super::postgres`]). One delivery per transaction makes
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
//! - **Each delivery all or nothing**: when a group of several fails for a reason that
//!   is not the database being away, each of its deliveries is tried again on its own, so
//!   one bad delivery cannot fail the others.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};

use super::postgres::{append_messages, map_err};
use super::{encode_json, DeliveryRecord, FailPoint, FailPoints, MessageRecord};
use super::{StoreError, StoreResult};

/// The most deliveries one commit takes (bounds a group's statement size).
const MAX_GROUP: usize = 256;

/// What a routed delivery's caller is answered: its stored messages, or `None` for a
/// duplicate.
pub(super) type Stored = StoreResult<Option<Vec<MessageRecord>>>;

/// One routed delivery waiting to be stored.
pub(super) struct RoutedJob {
    pub delivery: DeliveryRecord,
    pub messages: Vec<MessageRecord>,
    pub routed_to: Vec<String>,
    pub window_secs: i64,
    pub reply: oneshot::Sender<Stored>,
}

/// What the writer task shares with its store handle.
pub(super) struct WriterShared {
    pub pool: Pool,
    pub fail_points: Arc<FailPoints>,
    pub commits: AtomicU64,
    pub writes: AtomicU64,
}

/// Starts the writer task; it stores jobs sent to the returned channel in groups until
/// every sender is dropped.
pub(super) fn spawn(shared: Arc<WriterShared>) -> mpsc::UnboundedSender<RoutedJob> {
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
            // One window per group (callers use one, but the statement takes one value).
            let window = carried[0].window_secs;
            let split = carried
                .iter()
                .position(|j| j.window_secs != window)
                .unwrap_or(carried.len());
            let rest = carried.split_off(split);
            let group = std::mem::replace(&mut carried, rest);
            store_group(&shared, group).await;
        }
    });
    send
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
        Err(e) if jobs.len() == 1 || matches!(e, StoreError::Unavailable(_)) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
        // Something in the group would fail again: each on its own, so only that one does.
        Err(_) => {
            for job in jobs {
                let answer = try_group(shared, std::slice::from_ref(&job)).await;
                if answer.is_ok() {
                    shared.commits.fetch_add(1, Ordering::Relaxed);
                    shared.writes.fetch_add(1, Ordering::Relaxed);
                }
                let answer = answer.map(|mut a| a.pop().flatten());
                let _ = job.reply.send(answer);
            }
        }
    }
}

/// The group's transaction: returns each job's answer, in order.
async fn try_group(
    shared: &WriterShared,
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

    let mut conn = shared.pool.get().await.map_err(|e| {
        StoreError::Unavailable(format!(
            "{ctx}: cannot get a database connection ({e}); check that PostgreSQL is running \
             and reachable"
        ))
    })?;
    let tx = conn.transaction().await.map_err(db)?;
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
    shared.fail_points.trip(FailPoint::AfterMessagesWrite)?;
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
