//! The SQLite store's audit log: the chain's rows, the summaries its filters read, and
//! the groups of records appended one at a time.
//!
//! Records are rows of `audit_log`, one per record, keyed by `seq`. Every tool call
//! appends one, so what a record costs to append is paid on the hottest path, while the
//! log is read rarely (an operator's `GET /audit`). An index entry per record (one by
//! target, one by time) added two B-tree inserts to the row's own, and pages of both
//! indexes split and written to the write-ahead log at every commit. Nor did they
//! serve the reads: the one filter statement (`?5 IS NULL OR target = ?5`, ...) keeps
//! SQLite's planner off them, so every filtered read scanned the log from its start
//! (about 0.2 s a read at a million records). Instead the log is cut into buckets of
//! [`BUCKET_RECORDS`] consecutive seqs, and two small tables summarise them:
//! - `audit_targets (target, bucket)`: the buckets that hold a record of a target. A
//!   tool's calls add a row once per bucket, not once per call; a target of its own (a
//!   delivery) adds one per record, as an index would.
//! - `audit_times (bucket, first_at, last_at)`: the earliest and latest time in a bucket,
//!   written once per commit. The earliest and the latest, not the first and the last:
//!   a record's time is taken when its change is made, before the writer gives it its
//!   seq, so times are not in seq order.
//!
//! A filtered read walks the buckets that can hold a match, in seq order, and reads each
//! bucket's rows with the filters (a seq range of the table), until its page is full;
//! all in one read transaction, so a prune or an append between its statements cannot
//! make the summaries and the rows disagree. A filter by time scans `audit_times` (a row
//! per 256 records) from the page's start; a filter by target reads only that target's
//! buckets. 256 records keep a bucket's rows a few pages to read while a busy tool adds
//! a summary row per 256 calls. Filters by action or actor alone read the rows in seq
//! order, as they always did. Pruning deletes the summaries of the buckets it emptied. A
//! row changed in the database by hand is not summarised again: a filter may miss it,
//! and `verify` names it.

use std::collections::HashMap;

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use super::writer::Job;
use super::{map_err, select_all, SqliteStore};
use crate::audit_groups::Submitted;
use crate::rows;
use crate::{AuditQuery, AuditStore, StoreResult};
use connector_model::audit::{AuditAnchor, AuditEntry, AuditRecord};

/// Each bucket of the summaries holds the records whose seq has the same bits above
/// these. Fixed: migration 8 summarised the records before it with it (`seq >> 8`).
const BUCKET_BITS: u32 = 8;
/// Records per bucket.
const BUCKET_RECORDS: i64 = 1 << BUCKET_BITS;

/// Buckets read from a summary at a time while a filtered page is filled.
const BUCKETS_PER_READ: i64 = 64;

/// The most turns of the scheduler a new group of audit records waits for more records
/// before it goes to the writer ([`SqliteStore::submit_audit_group`]).
const GATHER_TURNS: usize = 8;

fn bucket(seq: i64) -> i64 {
    seq >> BUCKET_BITS
}

/// The two points of the chain the store keeps apart from its records.
#[derive(Clone, Copy)]
enum ChainPoint {
    /// Where the kept chain starts (the last record pruned).
    Anchor,
    /// The last record appended.
    Head,
}

/// The chain's head (`audit_head`) or the start of what is kept (`audit_anchor`).
fn read_chain_point(
    conn: &Connection,
    table: ChainPoint,
    op: &'static str,
) -> StoreResult<AuditAnchor> {
    let sql = match table {
        ChainPoint::Anchor => "SELECT seq, hash FROM audit_anchor WHERE id = 1",
        ChainPoint::Head => "SELECT seq, hash FROM audit_head WHERE id = 1",
    };
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_row([], |r| {
                Ok(AuditAnchor {
                    seq: r.get(0)?,
                    hash: r.get(1)?,
                })
            })
        })
        .map_err(|e| map_err(op, e))
}

/// Appends `entries` to the audit chain inside `tx` (the caller's transaction is
/// immediate, so no other connection appends in between); returns the sealed records.
pub(super) fn append_audit(
    tx: &Transaction<'_>,
    op: &'static str,
    entries: Vec<AuditEntry>,
) -> StoreResult<Vec<AuditRecord>> {
    let mut sealed = Vec::with_capacity(entries.len());
    write_audit(tx, op, entries, |record| sealed.push(record))?;
    Ok(sealed)
}

/// Appends `entries` to the audit chain inside `tx` (as [`append_audit`]), with their
/// summaries, handing each sealed record to `sealed`.
fn write_audit(
    tx: &Transaction<'_>,
    op: &'static str,
    entries: Vec<AuditEntry>,
    mut sealed: impl FnMut(AuditRecord),
) -> StoreResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let db = |e| map_err(op, e);
    let head = read_chain_point(tx, ChainPoint::Head, op)?;
    let mut summaries = Summaries::default();
    let (mut seq, mut prev) = (head.seq, head.hash);
    for entry in entries {
        seq += 1;
        let (record, details) = AuditRecord::seal_with_details(entry, seq, prev);
        insert_row(tx, &record, &details).map_err(db)?;
        summaries.add(tx, &record).map_err(db)?;
        prev = record.hash.clone();
        sealed(record);
    }
    summaries.write_times(tx).map_err(db)?;
    tx.prepare_cached("UPDATE audit_head SET seq = ?1, hash = ?2 WHERE id = 1")
        .and_then(|mut update| update.execute(params![seq, prev]))
        .map_err(db)?;
    Ok(())
}

/// Inserts `record`'s row into `audit_log`, with `details` as its canonical JSON (no
/// summaries: [`write_audit`] adds them).
fn insert_row(conn: &Connection, record: &AuditRecord, details: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO audit_log (seq, at, actor_kind, actor_id, action, target, outcome, details, trace_id, prev, hash)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        record.seq,
        record.at,
        record.actor.kind.as_str(),
        record.actor.id,
        record.action,
        record.target,
        record.outcome,
        details,
        record.trace_id,
        record.prev,
        record.hash
    ])?;
    Ok(())
}

/// What the records of one append add to the summaries.
#[derive(Default)]
struct Summaries {
    /// Each target this append wrote a summary of, with its latest bucket (records come
    /// in seq order, so a target's buckets only grow).
    targets: HashMap<String, i64>,
    /// The bucket being written, with the earliest and latest time of its records.
    times: Option<(i64, String, String)>,
}

impl Summaries {
    fn add(&mut self, tx: &Transaction<'_>, record: &AuditRecord) -> rusqlite::Result<()> {
        let bucket = bucket(record.seq);
        if self.targets.get(record.target.as_str()) != Some(&bucket) {
            tx.prepare_cached(
                "INSERT OR IGNORE INTO audit_targets (target, bucket) VALUES (?1, ?2)",
            )?
            .execute(params![record.target, bucket])?;
            self.targets.insert(record.target.clone(), bucket);
        }
        match &mut self.times {
            Some((b, first, last)) if *b == bucket => {
                if record.at < *first {
                    first.clone_from(&record.at);
                }
                if record.at > *last {
                    last.clone_from(&record.at);
                }
            }
            _ => {
                self.write_times(tx)?;
                self.times = Some((bucket, record.at.clone(), record.at.clone()));
            }
        }
        Ok(())
    }

    /// Widens the bucket's times in `audit_times` to those of this append's records.
    fn write_times(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let Some((bucket, first, last)) = self.times.take() else {
            return Ok(());
        };
        tx.prepare_cached(
            "INSERT INTO audit_times (bucket, first_at, last_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (bucket) DO UPDATE
                 SET first_at = min(first_at, excluded.first_at),
                     last_at = max(last_at, excluded.last_at)",
        )?
        .execute(params![bucket, first, last])?;
        Ok(())
    }
}

/// The records `query` asks for, oldest first (see the module docs).
fn read_records(conn: &Connection, query: &AuditQuery) -> StoreResult<Vec<AuditRecord>> {
    let op = "reading the audit log";
    let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
    if query.target.is_none() && query.since.is_none() && query.until.is_none() {
        return records_between(conn, op, query, query.after, i64::MAX, query.limit);
    }
    // One snapshot for the summaries and the rows they lead to: a prune or an append
    // between two statements cannot make them disagree.
    let snapshot = conn.unchecked_transaction().map_err(|e| map_err(op, e))?;
    let mut found = Vec::new();
    let mut next = bucket(query.after.saturating_add(1));
    loop {
        let buckets = buckets_from(&snapshot, op, query, next)?;
        for &b in &buckets {
            let start = b << BUCKET_BITS;
            let after = query.after.max(start - 1);
            let before = start.saturating_add(BUCKET_RECORDS);
            let left = u32::try_from(limit - found.len()).unwrap_or(u32::MAX);
            found.extend(records_between(&snapshot, op, query, after, before, left)?);
            if found.len() >= limit {
                return Ok(found);
            }
        }
        match buckets.last() {
            Some(&last) if buckets.len() as i64 == BUCKETS_PER_READ => next = last + 1,
            _ => return Ok(found),
        }
    }
}

/// Up to [`BUCKETS_PER_READ`] buckets from `from` on that can hold a record `query`
/// asks for by its target and times, in order.
fn buckets_from(
    conn: &Connection,
    op: &str,
    query: &AuditQuery,
    from: i64,
) -> StoreResult<Vec<i64>> {
    let bucket = |r: &rusqlite::Row<'_>| rows::StoredRow::int(r, 0);
    let (since, until) = (&query.since, &query.until);
    match &query.target {
        // A bucket without times (a summary removed by hand) is read, not skipped.
        Some(target) => select_all(
            conn,
            op,
            "SELECT t.bucket FROM audit_targets t LEFT JOIN audit_times m ON m.bucket = t.bucket
             WHERE t.target = ?1 AND t.bucket >= ?2
               AND (?3 IS NULL OR m.last_at IS NULL OR m.last_at >= ?3)
               AND (?4 IS NULL OR m.first_at IS NULL OR m.first_at < ?4)
             ORDER BY t.bucket LIMIT ?5",
            params![target, from, since, until, BUCKETS_PER_READ],
            bucket,
        ),
        None => select_all(
            conn,
            op,
            "SELECT bucket FROM audit_times
             WHERE bucket >= ?1
               AND (?2 IS NULL OR last_at >= ?2)
               AND (?3 IS NULL OR first_at < ?3)
             ORDER BY bucket LIMIT ?4",
            params![from, since, until, BUCKETS_PER_READ],
            bucket,
        ),
    }
}

/// Up to `limit` records with a seq in `(after, before)` that `query`'s filters take,
/// oldest first.
fn records_between(
    conn: &Connection,
    op: &str,
    query: &AuditQuery,
    after: i64,
    before: i64,
    limit: u32,
) -> StoreResult<Vec<AuditRecord>> {
    let sql = format!(
        "SELECT {} FROM audit_log
         WHERE seq > ?1 AND seq < ?9
           AND (?2 IS NULL OR action = ?2)
           AND (?3 IS NULL OR actor_kind = ?3)
           AND (?4 IS NULL OR actor_id = ?4)
           AND (?5 IS NULL OR target = ?5)
           AND (?6 IS NULL OR at >= ?6)
           AND (?7 IS NULL OR at < ?7)
         ORDER BY seq LIMIT ?8",
        rows::AUDIT_COLUMNS
    );
    let params = params![
        after,
        query.action,
        query.actor_kind,
        query.actor_id,
        query.target,
        query.since,
        query.until,
        limit,
        before
    ];
    select_all(conn, op, &sql, params, |r| rows::audit_record(r))
}

impl SqliteStore {
    /// Hands a new group of audit records to the writer as one job, which takes the
    /// group's records when the writer runs it (those appended until then are in it).
    ///
    /// The job goes to the writer after at most [`GATHER_TURNS`] turns of the scheduler,
    /// for as long as the group keeps growing: the writer thread, woken at once, would
    /// otherwise commit the first record or two alone while the calls that append the
    /// next ones wait for a core, and every commit has a cost of its own (the writer's
    /// wake-up, the transaction, the log pages it wrote and their checkpoint). A record
    /// appended alone waits one turn.
    fn submit_audit_group(&self, submitted: Submitted) {
        let op = "append_audit";
        let records = submitted.records();
        let gathering = submitted.records();
        let write = move |tx: &Transaction<'_>| write_audit(tx, op, records.take(), drop);
        let reply = move |outcome| submitted.finish(outcome);
        // A writer that stopped drops the job, and with it the group's `Submitted`, which
        // answers the group with the error.
        let job = Job::new(op, None, write, reply);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = self.writer.send(job);
            return;
        };
        // Gathering is for a writer thread woken at once; a writer on the caller's
        // thread serves one client, whose records come one at a time.
        if matches!(self.writer, super::writer::Writer::OnCaller { .. }) {
            let _ = self.writer.send(job);
            return;
        }
        let writer = self.writer.clone();
        runtime.spawn(async move {
            let mut held = gathering.len();
            for _ in 0..GATHER_TURNS {
                tokio::task::yield_now().await;
                let now = gathering.len();
                if now == held {
                    break;
                }
                held = now;
            }
            let _ = writer.send(job);
        });
    }

    /// One of the chain's two points, read beside the writer.
    async fn chain_point(&self, point: ChainPoint, op: &'static str) -> StoreResult<AuditAnchor> {
        self.read(op, move |conn| read_chain_point(conn, point, op))
            .await
    }
}

#[async_trait]
impl AuditStore for SqliteStore {
    async fn append_audit(&self, entries: Vec<AuditEntry>) -> StoreResult<Vec<AuditRecord>> {
        // A write job like any other: entries appended at the same moment share the
        // writer's transaction (group commit).
        self.write("append_audit", move |tx| {
            append_audit(tx, "append_audit", entries)
        })
        .await
    }

    async fn append_audit_entry(&self, entry: AuditEntry) -> StoreResult<()> {
        self.audit_groups
            .append(entry, |submitted| self.submit_audit_group(submitted))
            .await
    }

    async fn audit_records(&self, query: &AuditQuery) -> StoreResult<Vec<AuditRecord>> {
        let query = query.clone();
        self.read("reading the audit log", move |conn| {
            read_records(conn, &query)
        })
        .await
    }

    async fn audit_anchor(&self) -> StoreResult<AuditAnchor> {
        self.chain_point(ChainPoint::Anchor, "reading the audit anchor")
            .await
    }

    async fn audit_head(&self) -> StoreResult<AuditAnchor> {
        self.chain_point(ChainPoint::Head, "reading the audit head")
            .await
    }

    async fn prune_audit(&self, before: &str, max: u32) -> StoreResult<u64> {
        let before = before.to_owned();
        self.write("prune_audit", move |tx| {
            let db = |e| map_err("prune_audit", e);
            // The last record to go: of the `max` oldest, the last dated before `before`,
            // and never the newest.
            let last: Option<(i64, String)> = tx
                .query_row(
                    "SELECT seq, hash FROM
                         (SELECT seq, hash, at FROM audit_log ORDER BY seq LIMIT ?2)
                     WHERE at < ?1 AND seq < (SELECT MAX(seq) FROM audit_log)
                     ORDER BY seq DESC LIMIT 1",
                    params![before, max],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()
                .map_err(db)?;
            let Some((seq, hash)) = last else {
                return Ok(0);
            };
            let n = tx
                .execute("DELETE FROM audit_log WHERE seq <= ?1", [seq])
                .map_err(db)?;
            // The buckets this emptied: those whose every seq is at most `seq`.
            let emptied = bucket(seq + 1);
            tx.execute("DELETE FROM audit_targets WHERE bucket < ?1", [emptied])
                .map_err(db)?;
            tx.execute("DELETE FROM audit_times WHERE bucket < ?1", [emptied])
                .map_err(db)?;
            tx.execute(
                "UPDATE audit_anchor SET seq = ?1, hash = ?2 WHERE id = 1",
                params![seq, hash],
            )
            .map_err(db)?;
            Ok(n as u64)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::sqlite::migrate_to;
    use connector_model::audit::{target, Actor, ChainCheck, GENESIS};

    fn entry(i: i64) -> AuditEntry {
        let tool = if i % 5000 == 250 {
            "rare.one"
        } else {
            "acme.echo"
        };
        let mut entry = AuditEntry::now(Actor::agent("ada"), "tool.call", target::tool(tool));
        entry.at = format!(
            "2026-03-01T{:02}:{:02}:{:02}.000Z",
            i / 3600,
            i / 60 % 60,
            i % 60
        );
        entry.details = serde_json::json!({"n": i});
        entry
    }

    fn every(limit: u32) -> AuditQuery {
        AuditQuery {
            limit,
            ..AuditQuery::default()
        }
    }

    fn seqs(records: &[AuditRecord]) -> Vec<i64> {
        records.iter().map(|r| r.seq).collect()
    }

    /// A log kept before the summaries (schema version 7, an index entry per record)
    /// still verifies after the migration, its filters find what its indexes found, and
    /// new records go on from its head.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_log_kept_before_the_summaries_verifies_and_filters_after_the_migration() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let rare = AuditQuery {
            target: Some(target::tool("rare.one")),
            ..every(100)
        };
        let since = AuditQuery {
            since: Some("2026-03-01T00:09:00.000Z".into()),
            ..every(1000)
        };
        let (before_rare, before_since, head) = {
            let mut conn = Connection::open(&path).expect("the database");
            migrate_to(&mut conn, 7).expect("the schema before the summaries");
            let tx = conn.transaction().expect("a transaction");
            let mut prev = GENESIS.to_string();
            for seq in 1..=700 {
                // As the host before the summaries wrote a record: its row alone.
                let (record, details) = AuditRecord::seal_with_details(entry(seq), seq, prev);
                insert_row(&tx, &record, &details).expect("an old record");
                prev = record.hash;
            }
            tx.execute(
                "UPDATE audit_head SET seq = 700, hash = ?1 WHERE id = 1",
                [&prev],
            )
            .expect("the head");
            tx.commit().expect("the old records");
            let read = |q: &AuditQuery| records_between(&conn, "test", q, 0, i64::MAX, q.limit);
            (
                seqs(&read(&rare).expect("rare")),
                seqs(&read(&since).expect("since")),
                prev,
            )
        };
        assert_eq!(before_rare, [250]);
        assert_eq!(before_since.len(), 700 - 540 + 1);

        let store = SqliteStore::open(&path).expect("the migrated database");
        let conn = Connection::open(&path).expect("a connection");
        let indexes: Vec<String> = select_all(
            &conn,
            "test",
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_log'",
            [],
            |r| rows::StoredRow::text(r, 0),
        )
        .expect("the indexes");
        assert!(indexes.is_empty(), "{indexes:?}");
        assert_eq!(
            seqs(&store.audit_records(&rare).await.expect("rare")),
            before_rare
        );
        assert_eq!(
            seqs(&store.audit_records(&since).await.expect("since")),
            before_since
        );

        store
            .append_audit_entry(entry(701))
            .await
            .expect("a new record");
        let records = store.audit_records(&every(1000)).await.expect("the log");
        assert_eq!(records.len(), 701);
        assert_eq!(records[700].prev, head);
        let mut check = ChainCheck::from(&store.audit_anchor().await.expect("anchor"));
        records.iter().for_each(|r| check.next(r));
        check.ends_at(&store.audit_head().await.expect("head"));
        assert_eq!((check.checked(), check.first_broken()), (701, None));
    }

    /// The statements a filtered read runs, in steps of SQLite's virtual machine.
    fn steps(conn: &Connection, query: &AuditQuery) -> (u64, usize) {
        let counted = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&counted);
        conn.progress_handler(
            100,
            Some(move || {
                counter.fetch_add(100, Ordering::Relaxed);
                false
            }),
        );
        let found = read_records(conn, query).expect("a read").len();
        conn.progress_handler(100, None::<fn() -> bool>);
        (counted.load(Ordering::Relaxed), found)
    }

    /// A filter by target or by time reads a small part of a long log, not all of it: the
    /// buckets that hold its records.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_filter_by_target_or_time_reads_a_small_part_of_the_log() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("store");
        for start in (1..=10_000).step_by(1000) {
            let entries = (start..start + 1000).map(entry).collect();
            store.append_audit(entries).await.expect("records");
        }
        let conn = Connection::open(&path).expect("a connection");
        // Nothing matches: the read goes through the whole log.
        let whole = steps(
            &conn,
            &AuditQuery {
                action: Some("unit.put".into()),
                ..every(100)
            },
        );
        assert_eq!(whole.1, 0);
        let rare = steps(
            &conn,
            &AuditQuery {
                target: Some(target::tool("rare.one")),
                ..every(100)
            },
        );
        assert_eq!(rare.1, 2);
        let late = steps(
            &conn,
            &AuditQuery {
                since: Some("2026-03-01T02:40:00.000Z".into()),
                ..every(1000)
            },
        );
        assert_eq!(late.1, 10_000 - 9_600 + 1);
        for (name, (read, _)) in [("target", rare), ("since", late)] {
            assert!(
                read * 5 < whole.0,
                "a filter by {name} took {read} steps, a read of the whole log {}",
                whole.0
            );
        }
    }
}
