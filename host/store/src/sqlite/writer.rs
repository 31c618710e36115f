//! The SQLite store's writer: every write of a [`SqliteStore`](super::sqlite::SqliteStore)
//! runs on one thread that commits the writes waiting at that moment together (group
//! commit).
//!
//! Why: a commit has a fixed cost (the write lock on the file, the WAL frames and index
//! update, a thread hop), which capped durable webhooks at one commit per write — two per
//! delivery. Writes that arrive while a commit is under way now share the next one, so
//! that cost is paid per group, not per write, and a single write alone is no slower.
//!
//! The guarantees are those of one transaction per write:
//! - **Acknowledged only when committed.** A write's answer is sent after the commit that
//!   holds it; if that commit fails, every write of the group gets the error, and nothing
//!   of any of them is stored.
//! - **Each write all or nothing.** With more than one write in a group, each runs inside
//!   its own `SAVEPOINT`: a write that fails (or trips a fault) is rolled back to it alone
//!   and the others go on. A failure that ends the whole transaction (a full disk, an I/O
//!   error) fails the writes run so far; those not yet run start a new group.
//! - **In order, one at a time.** Writes run in arrival order, each seeing the ones before
//!   it, exactly as consecutive transactions would. An answer that depends on an earlier
//!   write of the group (a duplicate delivery id, a completed delivery) is only sent if
//!   that write commits with it.
//! - **A batch stops at its first failure.** The writes of one batch
//!   ([`StateStore::write_batch`](crate::StateStore::write_batch)) were each decided on
//!   top of the ones before it, so the moment one of them ends not ok — its own failure, its
//!   state version's bump, its savepoint, the transaction or the commit under it — the
//!   batch is stopped, and the writer answers each later write of it as not run, without
//!   running it, in this group or a later one.
//!
//! The thread ends when the last handle of the store is dropped.
//!
//! A process that serves one client (`connector-host mcp --local`) has no concurrent
//! writes to group, and there the two hand-overs to the writer thread and back cost more
//! than the commit itself (each wakes a thread, often on an idle core). Its store runs
//! each write on the caller's thread instead ([`Writes::OnCaller`]): the same groups, one
//! at a time under the connection's lock, with the same guarantees.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use rusqlite::{Transaction, TransactionBehavior};

use super::checkpoint::Checkpoints;
use super::{bump_state_version, map_err, Inner};
use crate::{StoreError, StoreResult};

/// The most writes one commit takes: bounds a group's WAL growth and how long the
/// connection is held away from readers.
pub(super) const MAX_GROUP: usize = 256;

/// One write waiting for the writer: runs in the group's transaction, keeps its result,
/// and answers once the group's fate is known.
pub(super) struct Job {
    op: &'static str,
    /// A change to the state (connectors, units, ...): also bump the state version and
    /// keep this change-log entry under it.
    change: Option<String>,
    /// The batch this write belongs to, if any.
    batch: Option<Arc<Batch>>,
    write: Box<dyn PendingWrite>,
}

/// The writes of one batch: the first of them that ends not ok stops it, and the writer
/// answers the ones after it as not run (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Batch {
    stopped: AtomicBool,
}

impl Batch {
    // Relaxed: only the writer thread reads and sets it.
    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }
}

/// A write's work and its answer, whatever its result type.
trait PendingWrite: Send {
    /// Runs the write; `true` if it succeeded. Its result is kept for [`Self::answer`].
    fn run(&mut self, tx: &Transaction<'_>) -> bool;
    /// Replaces the kept result with `e` (the write is rolled back after all).
    fn fail(&mut self, e: StoreError);
    /// Sends the kept result if the group committed (`Ok`), else the group's error;
    /// `true` if what it sent is `Ok`.
    fn answer(self: Box<Self>, group: StoreResult<()>) -> bool;
    /// Answers that the write was not run (and never will be).
    fn not_run(self: Box<Self>);
}

struct Typed<T, F, R> {
    op: &'static str,
    f: Option<F>,
    out: Option<StoreResult<T>>,
    /// Given the write's result, or `None` if it was not run.
    reply: R,
}

impl<T, F, R> PendingWrite for Typed<T, F, R>
where
    T: Send + 'static,
    F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    R: FnOnce(Option<StoreResult<T>>) + Send + 'static,
{
    fn run(&mut self, tx: &Transaction<'_>) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let op = self.op;
        let out = std::panic::catch_unwind(AssertUnwindSafe(|| f(tx))).unwrap_or_else(|_| {
            Err(StoreError::Unavailable(format!(
                "{op}: the database write panicked"
            )))
        });
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn fail(&mut self, e: StoreError) {
        self.out = Some(Err(e));
    }

    fn answer(self: Box<Self>, group: StoreResult<()>) -> bool {
        let Typed { op, out, reply, .. } = *self;
        let out = group.and_then(|()| {
            out.unwrap_or_else(|| {
                Err(StoreError::Unavailable(format!(
                    "{op}: the write did not run"
                )))
            })
        });
        let ok = out.is_ok();
        reply(Some(out));
        ok
    }

    fn not_run(self: Box<Self>) {
        (self.reply)(None);
    }
}

impl Job {
    /// A job running `f`, whose result `reply` is given once the transaction holding it
    /// has committed (or failed). A job dropped unanswered (the writer stopped) drops
    /// `reply` uncalled.
    pub(super) fn new<T, F, R>(op: &'static str, change: Option<String>, f: F, reply: R) -> Job
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
        R: FnOnce(StoreResult<T>) + Send + 'static,
    {
        // Only a job of a batch is ever answered as not run.
        let reply = move |out: Option<StoreResult<T>>| {
            reply(out.unwrap_or_else(|| {
                Err(StoreError::Unavailable(format!(
                    "{op}: the write did not run"
                )))
            }))
        };
        Job::batched(op, change, None, f, reply)
    }

    /// As [`Job::new`], for a write of `batch` (if any): `reply` is given `None` if the
    /// write was not run, because an earlier write of `batch` ended not ok.
    pub(super) fn batched<T, F, R>(
        op: &'static str,
        change: Option<String>,
        batch: Option<&Arc<Batch>>,
        f: F,
        reply: R,
    ) -> Job
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
        R: FnOnce(Option<StoreResult<T>>) + Send + 'static,
    {
        Job {
            op,
            change,
            batch: batch.cloned(),
            write: Box::new(Typed {
                op,
                f: Some(f),
                out: None,
                reply,
            }),
        }
    }

    /// Whether an earlier write of this job's batch ended not ok: then this one must not
    /// run.
    fn stopped(&self) -> bool {
        self.batch.as_ref().is_some_and(|b| b.is_stopped())
    }

    /// This job ended not ok: the later writes of its batch must not run.
    fn stop_batch(&self) {
        if let Some(batch) = &self.batch {
            batch.stop();
        }
    }

    /// Answers the job (see [`PendingWrite::answer`]); an answer that is not `Ok` stops
    /// its batch.
    fn answer(self, group: StoreResult<()>) {
        let Job { batch, write, .. } = self;
        if !write.answer(group) {
            if let Some(batch) = batch {
                batch.stop();
            }
        }
    }

    /// Answers the job as not run.
    fn not_run(self) {
        self.write.not_run();
    }
}

/// Where a store's writes run (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Writes {
    /// On a thread of the store's own, which commits the writes waiting at one moment
    /// together: for a process with many callers.
    #[default]
    Grouped,
    /// On the thread that makes the write, one transaction at a time: for a process that
    /// serves one client, where a hand-over to another thread costs more than a commit.
    OnCaller,
}

/// The way to the writer: the queue of its thread, or the connection itself.
#[derive(Clone)]
pub(super) enum Writer {
    Thread(mpsc::Sender<Job>),
    OnCaller {
        inner: Arc<Inner>,
        checkpoints: Arc<parking_lot::Mutex<Option<Checkpoints>>>,
    },
}

impl Writer {
    /// The writer of `inner` that runs its writes as `writes` says; with
    /// [`Writes::Grouped`] its thread ends with the last clone.
    pub(super) fn start(
        inner: Arc<Inner>,
        checkpoints: Option<Checkpoints>,
        writes: Writes,
    ) -> StoreResult<Writer> {
        Ok(match writes {
            Writes::Grouped => Writer::Thread(spawn(inner, checkpoints)?),
            Writes::OnCaller => Writer::OnCaller {
                inner,
                checkpoints: Arc::new(parking_lot::Mutex::new(checkpoints)),
            },
        })
    }

    /// Runs `job` in the writer's next group; `Err` hands it back when the writer thread
    /// stopped. On the caller's thread it has run (and been answered) when this returns.
    pub(super) fn send(&self, job: Job) -> Result<(), Job> {
        match self {
            Writer::Thread(queue) => queue.send(job).map_err(|e| e.0),
            Writer::OnCaller { inner, checkpoints } => {
                // One group at a time, under the lock of the checkpointer's bookkeeping.
                let mut checkpoints = checkpoints.lock();
                let mut carried = vec![job];
                while !carried.is_empty() {
                    carried = commit_group(inner, carried, &mut checkpoints);
                }
                Ok(())
            }
        }
    }
}

/// Starts the writer thread for `inner`; jobs sent to the returned channel run in groups
/// until every sender is dropped.
fn spawn(
    inner: Arc<Inner>,
    mut checkpoints: Option<Checkpoints>,
) -> StoreResult<mpsc::Sender<Job>> {
    let (send, receive) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("sqlite-writer".into())
        .spawn(move || {
            let mut carried: Vec<Job> = Vec::new();
            loop {
                if carried.is_empty() {
                    match receive.recv() {
                        Ok(job) => carried.push(job),
                        Err(_) => return,
                    }
                }
                while carried.len() < MAX_GROUP {
                    match receive.try_recv() {
                        Ok(job) => carried.push(job),
                        Err(_) => break,
                    }
                }
                carried = commit_group(&inner, std::mem::take(&mut carried), &mut checkpoints);
            }
        })
        .map_err(|e| StoreError::Unavailable(format!("cannot start the database writer: {e}")))?;
    Ok(send)
}

/// [`run_group`], then the checkpointer's bookkeeping for what it wrote to the log (on
/// the thread that committed, where the log hook counted the frames); returns the jobs
/// left for the next group.
fn commit_group(inner: &Inner, jobs: Vec<Job>, checkpoints: &mut Option<Checkpoints>) -> Vec<Job> {
    let left = run_group(inner, jobs);
    if let Some(checkpoints) = checkpoints {
        checkpoints.after_commit(&inner.conn);
    }
    left
}

/// Runs `jobs` in one transaction and answers them; returns the jobs it did not get to
/// (the transaction ended under them), for the next group.
fn run_group(inner: &Inner, jobs: Vec<Job>) -> Vec<Job> {
    let mut conn = inner.conn.lock();
    let op = jobs.first().map_or("write", |j| j.op);
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let e = map_err(op, e);
            for job in jobs {
                if job.stopped() {
                    job.not_run();
                } else {
                    job.answer(Err(e.clone()));
                }
            }
            return Vec::new();
        }
    };
    // A single job needs no savepoint: its failure rolls the whole transaction back.
    let savepoints = jobs.len() > 1;
    let mut ran: Vec<Job> = Vec::with_capacity(jobs.len());
    let mut versions: Vec<i64> = Vec::new();
    let mut pending = jobs.into_iter();
    while let Some(mut job) = pending.next() {
        if job.stopped() {
            job.not_run();
            continue;
        }
        if savepoints {
            if let Err(e) = execute_cached(&tx, "SAVEPOINT job") {
                let e = map_err(job.op, e);
                if ran.is_empty() {
                    // Nothing could run at all: this job gets the error (handing it back
                    // would retry it forever), the others a new group.
                    job.answer(Err(e));
                    drop(tx);
                    return pending.collect();
                }
                // Not run: it goes to the next group with the rest.
                let left = std::iter::once(job).chain(pending).collect();
                return broken(tx, ran, left, e);
            }
        }
        let mut ok = job.write.run(&tx);
        if let (true, Some(change)) = (ok, &job.change) {
            match bump_state_version(&tx, change) {
                Ok(version) => versions.push(version),
                Err(e) => {
                    job.write.fail(map_err(job.op, e));
                    ok = false;
                }
            }
        }
        if !ok {
            // Before the next job of the group runs: it may be of the same batch.
            job.stop_batch();
        }
        let mut ended = None;
        if savepoints {
            let ended_ok = if ok {
                execute_cached(&tx, "RELEASE job")
            } else {
                tx.execute_batch("ROLLBACK TO job; RELEASE job")
            };
            if let Err(e) = ended_ok {
                ended = Some(map_err(job.op, e));
            }
        }
        if ended.is_some() || tx.is_autocommit() {
            let e = ended.unwrap_or_else(|| {
                StoreError::Unavailable(format!("{}: the database ended the transaction", job.op))
            });
            // A job that failed keeps its own error; the others of the group get `e`.
            job.answer(if ok { Err(e.clone()) } else { Ok(()) });
            return broken(tx, ran, pending.collect(), e);
        }
        ran.push(job);
        if !ok && !savepoints {
            // The only job failed: roll back and give it its own error.
            drop(tx);
            for job in ran {
                job.answer(Ok(()));
            }
            return Vec::new();
        }
    }
    if ran.is_empty() {
        // Every job was of a stopped batch: nothing to commit.
        return Vec::new();
    }
    // Recorded before the commit and under a lock held across it: a check on this handle
    // never sees a new version without knowing it is ours.
    let mut own = inner.own_versions.lock();
    for &v in &versions {
        own.insert(v);
    }
    let committed = tx.commit().map_err(|e| map_err(op, e));
    if committed.is_err() {
        for &v in &versions {
            own.remove(v);
        }
    }
    drop(own);
    if committed.is_ok() {
        inner.commits.fetch_add(1, Ordering::Relaxed);
        inner.writes.fetch_add(ran.len() as u64, Ordering::Relaxed);
    }
    for job in ran {
        job.answer(committed.clone());
    }
    Vec::new()
}

/// The transaction ended (or cannot go on) under a group: the jobs that ran get `e`
/// (nothing of theirs is kept, and their batches stop); those that did not are handed
/// back for a new group.
fn broken(tx: Transaction<'_>, ran: Vec<Job>, left: Vec<Job>, e: StoreError) -> Vec<Job> {
    drop(tx); // rolls back whatever is left of it
    for job in ran {
        job.answer(Err(e.clone()));
    }
    left
}

/// Runs one statement from the connection's statement cache (the savepoints of every
/// job of every group: parsed once, not once per job).
fn execute_cached(tx: &Transaction<'_>, sql: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(sql)?.execute([]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Poll;
    use std::time::Duration;

    use crate::sqlite::SqliteStore;
    use crate::{AuditStore, DeliveryQueue, InboxStore, ReplicaCoordination, StateStore};
    use crate::{BatchedWrite, StateWrite};
    use connector_model::audit::{target, Actor, AuditEntry};
    use connector_model::records::DeliveryStatus;
    use connector_store_testing::faults::{inject_sqlite, Fault, INJECTED};
    use connector_store_testing::fixtures::{claim, delivery, message, unit};

    /// Holds the connection while the writes `start` spawns are handed to the writer, so
    /// they queue up and run as one group (or two: the writer may take the first alone).
    async fn grouped<T: Send + 'static>(
        store: &SqliteStore,
        start: impl FnOnce() -> Vec<tokio::task::JoinHandle<T>>,
    ) -> Vec<T> {
        let writes = {
            let _held = store.inner.conn.lock();
            let writes = start();
            // The tasks run on the runtime's workers meanwhile: each has sent its write
            // by then (a send is the first thing it does).
            std::thread::sleep(Duration::from_millis(200));
            writes
        };
        let mut out = Vec::new();
        for w in writes {
            out.push(w.await.expect("write task"));
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_failing_inside_a_group_is_rolled_back_alone() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("store");
        let c = claim("me", i64::MAX / 2);
        assert!(store
            .insert_delivery(&delivery("d1", 100), 60, &c, None)
            .await
            .expect("insert d1"));
        let before = store.commit_counts();

        inject_sqlite(&path, Some(Fault::AfterMessagesWrite)).expect("the fault");
        let spawn_insert = |id: &'static str| {
            let (s, c) = (store.clone(), c.clone());
            tokio::spawn(async move { s.insert_delivery(&delivery(id, 100), 60, &c, None).await })
        };
        let mut completes = None;
        let inserted = grouped(&store, || {
            let first = spawn_insert("d2");
            let s = store.clone();
            completes = Some(tokio::spawn(async move {
                let both = [message("m1", "u1", "d1"), message("m2", "u1", "d1")];
                s.complete_delivery("acme", "d1", &both, &["u1".into()], None)
                    .await
            }));
            vec![first, spawn_insert("d2"), spawn_insert("d3")]
        })
        .await;
        let completed = completes.expect("spawned").await.expect("complete task");

        // Some commit held more than one write.
        let after = store.commit_counts();
        assert!(
            after.writes - before.writes > after.commits - before.commits,
            "no group formed: {before:?} -> {after:?}"
        );
        // The write that tripped the fault failed and left nothing behind ...
        assert!(
            completed
                .as_ref()
                .is_err_and(|e| e.to_string().contains(INJECTED)),
            "{completed:?}"
        );
        let d1 = store
            .delivery("acme", "d1")
            .await
            .expect("d1")
            .expect("d1 stored");
        assert_eq!(d1.status, DeliveryStatus::Pending);
        assert!(store.messages("u1", 0, 10).await.expect("inbox").is_empty());
        // ... while the others in its group committed, each seeing the ones before it:
        // of the two inserts of `d2` (in either order) one stored it, the other found it.
        let inserted: Vec<bool> = inserted.into_iter().map(|r| r.expect("insert")).collect();
        assert_eq!(inserted.len(), 3);
        assert!(
            inserted[0] != inserted[1],
            "d2 twice or never: {inserted:?}"
        );
        assert!(inserted[2], "d3 not stored");
        for id in ["d2", "d3"] {
            assert!(
                store.delivery("acme", id).await.expect(id).is_some(),
                "{id}"
            );
        }
        // And the failed one goes through on its own afterwards.
        let stored = store
            .complete_delivery(
                "acme",
                "d1",
                &[message("m1", "u1", "d1")],
                &["u1".into()],
                None,
            )
            .await
            .expect("complete")
            .expect("first completion");
        assert_eq!(stored.len(), 1);
        assert_eq!(store.messages("u1", 0, 10).await.expect("inbox").len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn audit_records_appended_while_the_writer_is_busy_go_to_it_as_one_job() {
        let store = SqliteStore::open_in_memory().expect("store");
        let before = store.commit_counts();
        let appends = || {
            (0..20)
                .map(|i| {
                    let s = store.clone();
                    tokio::spawn(async move {
                        let entry = AuditEntry::now(
                            Actor::agent("ada"),
                            "tool.call",
                            target::tool(&format!("acme.t{i}")),
                        );
                        s.append_audit_entry(entry).await
                    })
                })
                .collect()
        };
        for r in grouped(&store, appends).await {
            r.expect("append");
        }
        let after = store.commit_counts();
        // One job per group of records (the writer may take the first record alone),
        // not one per record.
        assert!(
            after.writes - before.writes <= 2,
            "{} writer jobs for 20 records appended together",
            after.writes - before.writes
        );
        assert!(after.commits - before.commits <= 2);
        let head = store.audit_head().await.expect("head");
        assert_eq!(head.seq, 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn state_versions_written_in_one_group_are_all_this_handles_own() {
        let store = SqliteStore::open_in_memory().expect("store");
        let start = store.changes_since(0).await.expect("check").version;
        let before = store.commit_counts();
        let writes = || {
            (0..5)
                .map(|i| {
                    let s = store.clone();
                    tokio::spawn(async move { s.put_unit(&unit(&format!("u{i}"), None)).await })
                })
                .collect()
        };
        for r in grouped(&store, writes).await {
            r.expect("put_unit");
        }
        let after = store.commit_counts();
        assert!(
            after.commits - before.commits < 5,
            "five commits for five writes: no group formed"
        );
        let check = store.changes_since(start).await.expect("check");
        assert_eq!(check.version, start + 5);
        assert!(!check.foreign, "a grouped write looked foreign");
        // A second handle's write is still told apart.
        let path = tempfile::NamedTempFile::new().expect("tmp");
        let a = SqliteStore::open(path.path()).expect("a");
        let b = SqliteStore::open(path.path()).expect("b");
        let v = a.changes_since(0).await.expect("a").version;
        b.put_unit(&unit("x", None)).await.expect("b writes");
        assert!(a.changes_since(v).await.expect("a").foreign);
        assert_eq!(store.load().await.expect("load").units.len(), 5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_stops_inside_its_group_at_a_write_whose_version_bump_fails() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let store = SqliteStore::open(&path).expect("store");
        store.put_unit(&unit("gone", None)).await.expect("put gone");
        // The deletion's own statements succeed; its change-log entry, written by the
        // writer's version bump, fails.
        inject_sqlite(&path, Some(Fault::AfterUnitDelete)).expect("the fault");
        let version = store.load().await.expect("load").version;
        let records = store.audit_head().await.expect("head").seq;
        let before = store.commit_counts();

        // The writer is held inside a write of its own until the whole batch is queued
        // behind it, so that the batch goes to it as one group.
        let (running, is_running) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let held = {
            let s = store.clone();
            tokio::spawn(async move {
                s.write("holding the writer", move |_| {
                    let _ = running.send(());
                    // Also returns once the test dropped `release` (it failed).
                    let _ = released.recv();
                    Ok(())
                })
                .await
            })
        };
        is_running
            .recv_timeout(Duration::from_secs(10))
            .expect("the held write runs");
        let (b, c) = (unit("b", None), unit("c", None));
        let record = |action: &str, unit: &str| {
            AuditEntry::now(Actor::operator(), action, target::unit(unit))
        };
        let (rgone, rb, rc) = (
            record("unit.delete", "gone"),
            record("unit.put", "b"),
            record("unit.put", "c"),
        );
        let writes = [
            (StateWrite::DeleteUnit("gone"), &rgone),
            (StateWrite::PutUnit(&b), &rb),
            (StateWrite::PutUnit(&c), &rc),
        ];
        let mut batch = std::pin::pin!(store.write_batch(&writes));
        // Polled once, the batch has sent all its writes (it sends them before it waits).
        let polled = std::future::poll_fn(|cx| Poll::Ready(batch.as_mut().poll(cx))).await;
        assert!(polled.is_pending(), "answered while the writer was held");
        release.send(()).expect("the held write waits");
        let outcomes = batch.await;
        held.await.expect("held write task").expect("held write");

        assert!(
            matches!(
                outcomes.as_slice(),
                [
                    BatchedWrite::Failed(e),
                    BatchedWrite::NotRun,
                    BatchedWrite::NotRun
                ] if e.to_string().contains(INJECTED)
            ),
            "{outcomes:?}"
        );
        // Two commits: the held write's and the batch's group. (The deletion run alone,
        // its failure would have committed nothing: the later writes shared its group.)
        let after = store.commit_counts();
        assert_eq!(
            after.commits - before.commits,
            2,
            "the deletion ran alone: {before:?} -> {after:?}"
        );
        // Nothing of the batch is stored, and the version did not move.
        let stored = store.load().await.expect("load");
        let mut units: Vec<&str> = stored.units.iter().map(|u| u.id.as_str()).collect();
        units.sort_unstable();
        assert_eq!(units, ["gone"]);
        assert_eq!(stored.version, version);
        assert_eq!(store.audit_head().await.expect("head").seq, records);

        // Disarmed, the same batch commits whole.
        inject_sqlite(&path, None).expect("disarm");
        let outcomes = store.write_batch(&writes).await;
        assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, BatchedWrite::Committed)),
            "{outcomes:?}"
        );
        let stored = store.load().await.expect("load");
        assert_eq!(stored.version, version + 3);
        let mut units: Vec<&str> = stored.units.iter().map(|u| u.id.as_str()).collect();
        units.sort_unstable();
        assert_eq!(units, ["b", "c"]);
    }
}
