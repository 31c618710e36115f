//! Several host replicas on one shared database.
//!
//! Each replica serves from memory (the directory, the resolver's cache, the registry)
//! so a tool call never waits on a query for its grants. On a shared store
//! ([`Store::is_shared`](connector_store::ReplicaCoordination::is_shared)) that memory can go stale when
//! another replica writes, so:
//!
//! - **Before serving a request** the replica asks the store whether the state version
//!   moved ([`ReplicaSync::refresh`]). Concurrent requests share one check: a request waits for
//!   a check that *started after it arrived*, so a bind committed through any replica
//!   before a request arrives here is always seen by that request, at the cost of at most
//!   one small query in flight per replica. A version written by this replica itself needs
//!   nothing; versions written by other replicas are caught up with from the store's
//!   change log (every state write keeps its change there, in its own transaction): the
//!   same changes their replicas applied, read without the write lock and applied under
//!   it in one step ([`State::catch_up`]), so they never interleave with a local write and
//!   readers see them all or not at all. Only when the log cannot bring memory up to date
//!   (pruned past this replica's version, or a connector changed) is the state reloaded:
//!   one consistent snapshot, read and made ready without the write lock (see
//!   [`State::reload`]) and put in place under it in one step, with the same guarantees.
//!   A connector another replica installed is served from the
//!   description that replica stored, and its component compiles in the background (calls
//!   into it wait for that, within their deadline): catching up never makes requests wait
//!   for a compilation. If the database cannot be asked, the request fails with `503`
//!   rather than being served from state that may be stale.
//! - **A tool server beside `serve`** (`connector-host mcp --local`,
//!   `Role::ToolServer` of the start-up) does the same on any store,
//!   SQLite included: `serve` writes the file it reads, and two handles on one SQLite file
//!   behave as two replicas (the state version and its own-writes record live in the
//!   file and the handle), so a grant made through `serve` is seen by its next request.
//! - **In the background** the same check runs every [`BACKGROUND_REFRESH`], so open MCP
//!   sessions learn about a bind on another replica without a request of their own.
//! - **Webhook deliveries are claimed.** A replica stores a delivery with a claim that
//!   lapses after a lease; every replica sweeps for unclaimed or lapsed
//!   pending deliveries every [`SWEEP_INTERVAL`](crate::webhooks::SWEEP_INTERVAL) (with `SKIP LOCKED` in PostgreSQL), so
//!   the work of a replica that died is finished by the others and never by two at once.
//!   Messages stay exactly-once regardless: completing a delivery refuses to run twice.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::{Catalog, Preparing};
use crate::state::State;
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_store::Store;

/// How often a replica on a shared store checks for changes on its own.
pub const BACKGROUND_REFRESH: Duration = Duration::from_millis(200);
/// How long a request waits for the shared state check (a reload included) before it
/// is answered `503`.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How this replica has caught up with other processes' writes since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUps {
    /// Times it applied their changes from the store's change log.
    pub applied: u64,
    /// Times it reloaded the whole state instead (the log did not reach back far enough,
    /// or a connector changed).
    pub reloaded: u64,
}

/// Keeps this replica's in-memory state in step with the shared database.
pub(crate) struct ReplicaSync {
    store: Arc<dyn Store>,
    state: Arc<State>,
    catalog: Arc<Catalog>,
    /// Stable across restarts (kept in `<data_dir>/replica-id`): a restarted replica takes
    /// back its own claims at once instead of waiting for them to lapse.
    id: String,
    /// The state version the in-memory state reflects.
    applied: AtomicI64,
    /// Requests that asked for a check, in arrival order.
    arrivals: AtomicU64,
    /// Every request with a ticket up to this one has been covered by a finished check.
    checked_through: AtomicU64,
    /// Every request with a ticket up to this one was covered by a check that failed:
    /// it gets that failure at once instead of queueing for a check of its own.
    failed_through: AtomicU64,
    /// Every request with a ticket up to this one is covered by the check in flight (0:
    /// none is).
    in_flight_through: AtomicU64,
    /// Bumped whenever a check ends, to wake the requests waiting for one.
    finished: tokio::sync::watch::Sender<u64>,
    /// One check at a time.
    check: tokio::sync::Mutex<()>,
    /// Whether other processes write this database: the store is shared, or this
    /// process serves tools beside the one that writes it (`Role::ToolServer`).
    follow: bool,
    /// See [`CatchUps`].
    caught_up: AtomicU64,
    reloaded: AtomicU64,
}

impl ReplicaSync {
    /// Replica `id` whose memory reflects state version `applied`; `follow`: other
    /// processes write the database, so check for their changes.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        state: Arc<State>,
        catalog: Arc<Catalog>,
        id: String,
        applied: i64,
        follow: bool,
    ) -> Self {
        Self {
            store,
            state,
            catalog,
            id,
            applied: AtomicI64::new(applied),
            arrivals: AtomicU64::new(0),
            checked_through: AtomicU64::new(0),
            failed_through: AtomicU64::new(0),
            in_flight_through: AtomicU64::new(0),
            finished: tokio::sync::watch::Sender::new(0),
            check: tokio::sync::Mutex::new(()),
            follow,
            caught_up: AtomicU64::new(0),
            reloaded: AtomicU64::new(0),
        }
    }

    /// How this replica has caught up with other processes' writes so far.
    pub(crate) fn catch_ups(&self) -> CatchUps {
        CatchUps {
            applied: self.caught_up.load(Ordering::Relaxed),
            reloaded: self.reloaded.load(Ordering::Relaxed),
        }
    }

    /// Whether other processes write this database, so that [`Self::refresh`] has
    /// anything to do.
    pub(crate) fn follows_other_writers(&self) -> bool {
        self.follow
    }

    /// The state version the in-memory state reflects: every change up to it is
    /// visible, so a store still at this version holds nothing to catch up with.
    pub(crate) fn applied(&self) -> i64 {
        self.applied.load(Ordering::SeqCst)
    }

    /// This replica's id (see `<data_dir>/replica-id`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Brings this replica's in-memory state up to date with the shared database: every
    /// change committed (through any replica) before this call started is visible after
    /// it returns. A no-op on a store only this process writes.
    ///
    /// A call is answered by the first check that *started after it arrived*; it starts
    /// one itself unless such a check is already in flight. One check runs at a time, and
    /// its end wakes every call it answers at once (waking them one after another, each
    /// taking and releasing a lock in turn, cost a third of the tool-call rate on
    /// PostgreSQL). Overlapping checks were measured and are no faster: each is one more
    /// query for the database to answer.
    pub(crate) async fn refresh(&self) -> HostResult<()> {
        if !self.follow {
            return Ok(());
        }
        let ticket = self.arrivals.fetch_add(1, Ordering::SeqCst) + 1;
        // Subscribed before the first look at the counters, so a check finishing in
        // between still wakes this call.
        let mut finished = self.finished.subscribe();
        loop {
            if let Some(answer) = self.answer(ticket) {
                return answer;
            }
            if self.in_flight_through.load(Ordering::SeqCst) >= ticket {
                // A check that started after this call arrived is in flight: its end
                // answers this call (or, if it was cancelled, sends it round again).
                if finished.changed().await.is_err() {
                    // The sender lives in `self`: unreachable, but never a busy loop.
                    return Err(Self::stopped());
                }
                continue;
            }
            // Wait for the running check to end, then look again: a check that covers this
            // call may have started or ended meanwhile.
            let _one_at_a_time = tokio::select! {
                guard = self.check.lock() => guard,
                changed = finished.changed() => match changed {
                    Ok(()) => continue,
                    // The sender lives in `self`: unreachable, but never a busy loop.
                    Err(_) => return Err(Self::stopped()),
                },
            };
            // Holding the lock, no check is in flight: one that covered this call has
            // ended (answered above) or been cancelled, or none has started since it
            // arrived.
            if let Some(answer) = self.answer(ticket) {
                return answer;
            }
            return self.run_check().await;
        }
    }

    fn stopped() -> HostError {
        HostError::new(
            ErrorCode::StoreUnavailable,
            "the shared state check stopped; retry shortly",
        )
    }

    /// The answer of a finished check that covered `ticket`, if one did.
    fn answer(&self, ticket: u64) -> Option<HostResult<()>> {
        if self.checked_through.load(Ordering::SeqCst) >= ticket {
            return Some(Ok(()));
        }
        if self.failed_through.load(Ordering::SeqCst) >= ticket {
            return Some(Err(HostError::new(
                ErrorCode::StoreUnavailable,
                "the shared database did not answer; retry shortly",
            )));
        }
        None
    }

    /// Runs one check on behalf of every call that arrived before it starts (the caller
    /// among them) and wakes the calls waiting for it when it ends — also when the call
    /// running it is dropped half-way (a client that went away), so that the others then
    /// run a check of their own. Runs under [`Self::check`].
    async fn run_check(&self) -> HostResult<()> {
        /// Marks the check ended when dropped.
        struct Ended<'a>(&'a ReplicaSync);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                self.0.in_flight_through.store(0, Ordering::SeqCst);
                self.0.finished.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
        let covers = self.arrivals.load(Ordering::SeqCst);
        self.in_flight_through.store(covers, Ordering::SeqCst);
        let _ended = Ended(self);
        let checked = match tokio::time::timeout(CHECK_TIMEOUT, self.check_and_reload()).await {
            Ok(result) => result,
            Err(_) => Err(HostError::new(
                ErrorCode::StoreUnavailable,
                format!(
                    "the shared database did not answer within {} s; retry shortly",
                    CHECK_TIMEOUT.as_secs()
                ),
            )),
        };
        match &checked {
            Ok(()) => self.checked_through.fetch_max(covers, Ordering::SeqCst),
            Err(_) => self.failed_through.fetch_max(covers, Ordering::SeqCst),
        };
        checked
    }

    async fn check_and_reload(&self) -> HostResult<()> {
        let applied = self.applied.load(Ordering::SeqCst);
        let check = self.store.changes_since(applied).await?;
        if check.foreign {
            if self
                .state
                .catch_up(self.store.as_ref(), applied, check.version)
                .await?
            {
                self.store.applied(check.version);
                self.applied.store(check.version, Ordering::SeqCst);
                self.caught_up.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    from = applied,
                    to = check.version,
                    "applied what other replicas changed"
                );
            } else {
                self.reload().await?;
            }
        } else {
            let _ = self.applied.compare_exchange(
                applied,
                check.version.max(applied),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        Ok(())
    }

    /// Replaces the in-memory state with the database's (see [`State::reload`]).
    async fn reload(&self) -> HostResult<()> {
        let catalog = &self.catalog;
        let version = self
            .state
            .reload(|snapshot, earlier| async move {
                catalog
                    .prepare_stored(&snapshot, earlier, Preparing::Described)
                    .await
            })
            .await?;
        self.store.applied(version);
        self.applied.store(version, Ordering::SeqCst);
        self.reloaded.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(version, "reloaded state changed by another replica");
        Ok(())
    }

    /// On a shared store, checks for other replicas' changes every
    /// [`BACKGROUND_REFRESH`] (so open MCP sessions learn about them without a request of
    /// their own) until this is dropped.
    pub(crate) fn spawn_background_refresh(self: &Arc<Self>) {
        if !self.follow {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(BACKGROUND_REFRESH).await;
                let Some(this) = weak.upgrade() else { return };
                match this.refresh().await {
                    Ok(()) if failing => {
                        tracing::info!("the database answers again; state refreshed");
                        failing = false;
                    }
                    Ok(()) => {}
                    Err(e) if !failing => {
                        tracing::warn!(error = %e, "cannot check the shared state; requests get 503 until the database answers");
                        failing = true;
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HostConfig;
    use crate::registry::ConnectorRegistry;
    use crate::state::StateChange;
    use connector_runtime::{ConnectorRuntime, RuntimeOptions};
    use connector_store::sqlite::SqliteStore;
    use connector_store::StateStore;
    use connector_store_testing::fixtures::unit;

    /// Waits (briefly) until `ready` holds.
    async fn until(what: &str, ready: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !ready() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting: {what}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A check cancelled half-way (its request's client went away) must not strand the
    /// requests that were waiting for it: they run a check of their own and see what
    /// another process wrote. (One thread: the spawned requests run in the order they
    /// were spawned, so which one runs the check is known.)
    ///
    /// Seen failing with the wake-up moved out of `Ended::drop` to the end of a
    /// completed check: the waiter then waits forever.
    #[tokio::test(flavor = "current_thread")]
    async fn requests_waiting_for_a_cancelled_check_run_their_own() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("host.db");
        let ours: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).expect("our handle"));
        let theirs = SqliteStore::open(&path).expect("another process's handle");
        let mut snapshot = ours.load().await.expect("load");
        let runtime = Arc::new(ConnectorRuntime::new(RuntimeOptions::default()).expect("runtime"));
        let state = Arc::new(State::new(
            ours.clone(),
            crate::audit::AuditLog::new(ours.clone(), Default::default()),
            ConnectorRegistry::new(runtime.clone()),
            &mut snapshot,
        ));
        let catalog = Arc::new(Catalog::new(
            Arc::new(HostConfig::default()),
            runtime,
            state.clone(),
        ));
        let sync = Arc::new(ReplicaSync::new(
            ours,
            state.clone(),
            catalog,
            "r1".into(),
            snapshot.version,
            true,
        ));
        // Another process writes: the next check finds a foreign version and reloads,
        // which waits for the state's write lock, held here by a local write.
        theirs
            .put_unit(&unit("theirs", None))
            .await
            .expect("their write");
        // A local write in progress (it holds the write lock until released).
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let (holding, held) = tokio::sync::oneshot::channel::<()>();
        let writing = tokio::spawn({
            let state = state.clone();
            async move {
                let lock = state.hold_writes().await;
                let _ = holding.send(());
                let _ = released.await;
                drop(lock);
                state
                    .write(
                        &crate::audit::Audit::new(
                            &connector_model::audit::Actor::host(),
                            "unit.put",
                            "unit:ours".into(),
                        ),
                        |_| Ok((StateChange::PutUnit(unit("ours", None)), ())),
                    )
                    .await
            }
        });
        held.await.expect("the write lock is held");

        // Two requests arrive while a check holds the lock, so the next check covers
        // both; the first in line runs it.
        let held = sync.check.lock().await;
        let request = || {
            let sync = sync.clone();
            tokio::spawn(async move { sync.refresh().await })
        };
        let (runner, waiter) = (request(), request());
        until("both requests arrive", || {
            sync.arrivals.load(Ordering::SeqCst) == 2
        })
        .await;
        drop(held);
        until("one check covers both requests", || {
            sync.in_flight_through.load(Ordering::SeqCst) == 2
        })
        .await;
        assert!(!waiter.is_finished(), "answered before its check ended");
        // The end of an earlier check wakes the waiter: it finds the runner's check in
        // flight and now waits for that check's end alone (no longer for the lock).
        sync.finished.send_modify(|n| *n = n.wrapping_add(1));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "answered before its check ended");

        // The runner goes away; the waiter must not wait for a check that never ends.
        runner.abort();
        assert!(runner.await.is_err_and(|e| e.is_cancelled()));
        until("the waiter runs a check of its own", || {
            sync.in_flight_through.load(Ordering::SeqCst) == 2
        })
        .await;
        let _ = release.send(());
        writing.await.expect("the local write").expect("written");
        let answered = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiting request ran its own check instead of waiting forever")
            .expect("the request's task");
        answered.expect("the check succeeds");
        let directory = state.directory();
        assert!(
            directory.unit("theirs").is_some() && directory.unit("ours").is_some(),
            "the other process's write and the local one are both visible"
        );
    }
}
